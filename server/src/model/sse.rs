//! From response bytes to a step: the body is read chunk by chunk under the first-byte and idle
//! timeouts, framed into SSE events by `sseer`, and each event handed to the wire's stream codec.

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use sseer::errors::EventStreamError;

use super::anthropic::MessagesStream;
use super::error::{error_chain, seconds};
use super::google::GenerateStream;
use super::openai::ChatStream;
use super::responses::ResponsesStream;
use super::{ModelError, Step, StepEvents, Timeouts, Wire};

/// Whether a codec wants more events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Keep reading.
    More,
    /// The vendor's end marker arrived (`[DONE]`, `message_stop`, `response.completed`); stop
    /// reading. (Gemini has none: its stream ends with the body.)
    Done,
}

/// The stream codec of each wire.
#[derive(Debug)]
enum Decoder {
    OpenAi(ChatStream),
    Responses(ResponsesStream),
    Anthropic(MessagesStream),
    Google(GenerateStream),
}

impl Decoder {
    fn new(wire: Wire) -> Self {
        match wire {
            Wire::OpenAiChat => Self::OpenAi(ChatStream::default()),
            Wire::OpenAiResponses => Self::Responses(ResponsesStream::default()),
            Wire::Anthropic => Self::Anthropic(MessagesStream::default()),
            Wire::Google => Self::Google(GenerateStream::default()),
        }
    }

    fn event(&mut self, name: &str, data: &str, events: &mut StepEvents<'_>) -> Result<Flow, ModelError> {
        match self {
            Self::OpenAi(stream) => stream.data(data, events),
            Self::Responses(stream) => stream.event(name, data, events),
            Self::Anthropic(stream) => stream.event(name, data, events),
            Self::Google(stream) => stream.data(data, events),
        }
    }

    fn finish(self) -> Result<Step, ModelError> {
        match self {
            Self::OpenAi(stream) => stream.finish(),
            Self::Responses(stream) => stream.finish(),
            Self::Anthropic(stream) => stream.finish(),
            Self::Google(stream) => stream.finish(),
        }
    }
}

/// Reads SSE events from `chunks` into a step, pushing stream events as they come.
pub(crate) async fn decode<S>(wire: Wire, chunks: S, events: &mut StepEvents<'_>) -> Result<Step, ModelError>
where
    S: Stream<Item = Result<Bytes, ModelError>>,
{
    let mut decoder = Decoder::new(wire);
    let mut sse = std::pin::pin!(sseer::EventStream::new(chunks));
    while let Some(item) = sse.next().await {
        let event = item.map_err(|error| match error {
            EventStreamError::Transport(error) => error,
            EventStreamError::Utf8Error(error) => ModelError::stream(format!("Provider sent invalid UTF-8: {error}")),
        })?;
        if decoder.event(&event.event, &event.data, events)? == Flow::Done {
            break;
        }
    }
    decoder.finish()
}

/// The response body as chunks: the first must come within `first_byte`, each next one within
/// `idle`; a timeout or a transport failure ends the stream with its error.
pub(crate) fn body_chunks(
    response: reqwest::Response,
    timeouts: Timeouts,
) -> impl Stream<Item = Result<Bytes, ModelError>> + Send {
    futures_util::stream::unfold(Some((response, true)), move |state| async move {
        let (mut response, first) = state?;
        let wait = if first { timeouts.first_byte } else { timeouts.idle };
        match tokio::time::timeout(wait, response.chunk()).await {
            Err(_) => Some((Err(ModelError::timeout(format!("Provider stream idle for {}", seconds(wait)))), None)),
            Ok(Err(error)) => {
                let message = format!("Provider stream failed: {}", error_chain(&error));
                Some((Err(ModelError::stream(message)), None))
            }
            Ok(Ok(None)) => None,
            Ok(Ok(Some(bytes))) => Some((Ok(bytes), Some((response, false)))),
        }
    })
}

/// Decoding SSE text in memory, for the codecs' stream tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::model::StreamEvent;

    /// Decodes `chunks` as the body, returning the events pushed and the outcome.
    pub(crate) async fn replay_chunks(
        wire: Wire,
        chunks: Vec<Vec<u8>>,
    ) -> (Vec<StreamEvent>, Result<Step, ModelError>) {
        let mut seen = Vec::new();
        let mut push = |event: StreamEvent| seen.push(event);
        let body = futures_util::stream::iter(chunks.into_iter().map(|chunk| Ok(Bytes::from(chunk))));
        let step = decode(wire, body, &mut push).await;
        (seen, step)
    }

    /// Decodes `text` sent as one chunk.
    pub(crate) async fn replay(wire: Wire, text: &str) -> (Vec<StreamEvent>, Result<Step, ModelError>) {
        replay_chunks(wire, vec![text.as_bytes().to_vec()]).await
    }

    /// Decodes `text` split in two at every byte, one byte per chunk, and with CRLF line ends one
    /// byte per chunk, and checks that every way gives the same events and outcome as the whole
    /// text; returns that.
    pub(crate) async fn decode_every_split(wire: Wire, text: &str) -> (Vec<StreamEvent>, Result<Step, ModelError>) {
        let bytes = text.as_bytes();
        let whole = replay(wire, text).await;
        for cut in 1..bytes.len() {
            let split = replay_chunks(wire, vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()]).await;
            assert_eq!(split, whole, "split at byte {cut}");
        }
        let single = replay_chunks(wire, bytes.iter().map(|byte| vec![*byte]).collect()).await;
        assert_eq!(single, whole, "one byte per chunk");
        // CRLF line ends (JSON data holds no raw newline, so only line ends change).
        let crlf = text.replace('\n', "\r\n");
        let crlf_single = replay_chunks(wire, crlf.as_bytes().iter().map(|byte| vec![*byte]).collect()).await;
        assert_eq!(crlf_single, whole, "CRLF, one byte per chunk");
        whole
    }
}
