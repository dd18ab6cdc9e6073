//! What this workspace's own tests, benches and fuzz targets reach inside the server: the app's
//! state, the run engine's parts a scripted executor needs, the trigger monitors driven on a
//! manual clock, the Hypermedia blob builders a fake server checks against, and the parsers the
//! fuzz targets drive. Not the server's API: hidden from its docs, and free to change with any
//! commit.
//!
//! The paths mirror the modules they come from, so a test names `testing::runs::engine::Outcome`
//! where the server names `runs::engine::Outcome`.

pub use crate::app::App;

/// Failures.
pub mod error {
    pub use crate::error::ErrorKind;
}

/// In-process events.
pub mod bus {
    pub use crate::bus::{ChangeReason, Event};
}

/// The database.
pub mod db {
    pub use crate::db::Db;
}

/// The run engine's parts a scripted executor and staged runs need.
pub mod runs {
    pub use crate::runs::wait::Wait;
    pub use crate::runs::{children, finish, queue, wait};

    /// What the executor sees of the engine.
    pub mod engine {
        pub use crate::runs::executor::{Executor, Outcome, RunFailure, StopReason, StopSignal};
        pub use crate::runs::queue::Claimed;
    }
}

/// The agent runtime's visible texts.
pub mod runtime {
    pub use crate::runtime::{INTERRUPTED, replay};
}

/// The Hypermedia client and blob builders.
pub mod hm {
    pub use crate::hm::{Blob, HmClient, blob, capability, comment, document, publish_blobs_body, unixfs};
}

/// The body prefix parser the envelope fuzz target drives.
pub mod http {
    pub use crate::http::body;
}

/// The dispatch path without a handler, for the actions fuzz target.
pub mod dispatch {
    pub use crate::dispatch::{decode_for_fuzzing, lenient_for_fuzzing};
}

/// The chunk order the chunk-order fuzz target drives.
pub mod uploads {
    pub use crate::uploads::order::{AppendOrder, WAIT};
}

/// Memory paths, for the memory-path fuzz target.
pub mod memory {
    pub use crate::memory::path;
}

/// Delegated signers' capabilities.
pub mod signers {
    pub use crate::signers::sign_capability;
}

/// The key that seals secrets.
pub mod secrets {
    pub use crate::secrets::crypto;
}

/// Model providers' wire formats and vendors.
pub mod model {
    pub use crate::model::{
        Client, Endpoint, Message, ModelError, ModelErrorKind, ModelRequest, Retry, Step, StopReason, StreamEvent,
        Timeouts, ToolSpec, Usage, UserPart, endpoint_for, vendors,
    };
}

/// Provider model lists.
pub mod providers {
    pub use crate::providers::models;
}

/// Agents' default triggers.
pub mod agents {
    pub use crate::agents::default_trigger;
}

/// The trigger monitors, driven on a manual clock.
pub mod triggers {
    pub use crate::triggers::{activity, chain, monitor, schedule, sink};
}
