//! OpenAI-compatible chat completions (docs/runtime.md §2.2): one codec for the provider types
//! openai, openrouter, deepseek, groq, xai, ollama and custom. `request` writes the body of
//! `POST {base}/chat/completions`; `stream` reads its `data:` chunks into a step.

mod request;
mod stream;

pub(crate) use request::body;
pub(crate) use stream::ChatStream;
