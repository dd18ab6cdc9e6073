//! OpenAI's Responses API (docs/runtime.md §2.3): the codec of an `openai` model whose reasoning
//! is controlled (a level set, or an explicit `none`), and of subscription backends that speak
//! only this format. `request` writes the body of `POST {base}/responses` (`store: false`, the
//! system prompt as `instructions`, input items, encrypted reasoning handed back within a pass);
//! `stream` reads its named SSE events into a step, with composite `call_id|item_id` tool-call
//! ids.

mod request;
mod stream;

pub(crate) use request::body;
pub(crate) use stream::ResponsesStream;
