//! Anthropic Messages (docs/runtime.md §2.4): `request` writes the body of `POST {base}/v1/messages`
//! (cache markers, reduced tool schemas, budget thinking); `stream` reads its named SSE events
//! into a step.

mod request;
mod stream;

pub(crate) use request::{body, thinking_enabled};
pub(crate) use stream::MessagesStream;
