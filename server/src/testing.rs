//! What this workspace's own tests and benches reach inside the server: the app's state, the run
//! engine's parts a scripted executor needs, the trigger monitors driven on a manual clock, the
//! Hypermedia blob builders a fake server checks against, and the body limits. Not the server's
//! API: hidden from its docs, and free to change with any commit. (The fuzz targets drive the
//! server's core crate, `seed-agents-server-core`, and never build the server.)
//!
//! The paths mirror the modules they come from, so a test names `testing::runs::engine::Outcome`
//! where the server names `runs::engine::Outcome`.

pub use crate::app::App;

/// Failures.
pub mod error {
    pub use seed_agents_server_core::error::ErrorKind;
}

/// In-process events.
pub mod bus {
    pub use crate::bus::{ChangeReason, Event};
}

/// The database.
pub mod db {
    /// `url` with its connections using schema `schema` (created when missing), so each test
    /// server has a schema of its own in one PostgreSQL database.
    pub fn postgres_schema(url: &str, schema: &str) -> Result<String, String> {
        crate::db::pg_with_schema(url, schema)
    }

    pub use crate::db::{
        Connection, Db, Error, FromSql, MappedRows, OptionalExtension, Params, Result, Row, Rows, Statement, ToSql,
    };
}

/// The run engine's parts a scripted executor and staged runs need.
pub mod runs {
    pub use crate::runs::wait::Wait;

    /// Delegated children's texts.
    pub mod children {
        pub use crate::runs::children::LATE_RESULT;
    }

    /// Writing an outcome.
    pub mod finish {
        pub use crate::runs::finish::{Backoff, Lease, finish};
    }

    /// Enqueueing and claiming.
    pub mod queue {
        pub use crate::runs::queue::{Changes, NewRun, Queue, enqueue};
        pub use crate::runs::store::queue::claim_run;
    }

    /// What a parked run waits for.
    pub mod wait {
        pub use crate::runs::wait::Wait;
    }

    /// What the executor sees of the engine.
    pub mod engine {
        pub use crate::runs::executor::{Executor, Outcome, RunFailure, StopReason, StopSignal};
        pub use crate::runs::queue::Claimed;
    }
}

/// The agent runtime's visible texts.
/// The code sandbox, which its bench drives directly (docs/sandbox.md).
pub mod sandbox {
    pub use crate::sandbox::{
        Availability, ExecOutcome, ExecRequest, Progress, Runtime, Sandbox, SandboxError, SandboxErrorCode, Settings,
    };
}

pub mod runtime {
    pub use crate::runtime::INTERRUPTED;

    /// Texts of the replayed log.
    pub mod replay {
        pub use crate::runtime::replay::BACKGROUND_WORK_UPDATE;
    }
}

/// The Hypermedia client and blob builders.
pub mod hm {
    pub use crate::hm::{Blob, HmClient, publish_blobs_body};

    /// Signed blobs.
    pub mod blob {
        pub use crate::hm::blob::{principal, sign};
    }

    /// Capabilities.
    pub mod capability {
        pub use crate::hm::capability::{NewCapability, Role, capability};
    }

    /// Comments.
    pub mod comment {
        pub use crate::hm::comment::{NewComment, comment};
    }

    /// Documents.
    pub mod document {
        pub use crate::hm::document::{
            RefTarget, TextBlock, VersionRef, content_change, genesis, new_document, new_document_ops, reference,
            version_ref,
        };
    }

    /// UnixFS files.
    pub mod unixfs {
        pub use crate::hm::unixfs::file;
    }
}

/// The body limits.
pub mod http {
    /// The body limits.
    pub mod body {
        pub use seed_agents_server_core::body::{BodyLimits, Prefix, action_limit, limit_for, parse_prefix};
    }
}

/// Delegated signers' capabilities.
pub mod signers {
    pub use crate::signers::sign_capability;
}

/// The key that seals secrets.
pub mod secrets {
    /// The sealing key.
    pub mod crypto {
        pub use crate::secrets::crypto::SecretKey;
    }
}

/// Model providers' wire formats and vendors.
pub mod model {
    pub use crate::model::{
        Client, EncryptedReasoning, Endpoint, Image, Message, ModelError, ModelErrorKind, ModelRequest, Retry, Step,
        StopReason, StreamEvent, Thinking, Timeouts, ToolCall, ToolResult, ToolSpec, Usage, UserPart, Wire,
        endpoint_for,
    };

    /// The vendor catalog.
    pub mod vendors {
        pub use crate::model::vendors::{ModelListStyle, parse_provider_url};
    }
}

/// Provider model lists.
pub mod providers {
    /// Vendors' model lists.
    pub mod models {
        pub use crate::providers::models::fetch_models;
    }
}

/// Agents' default triggers.
pub mod agents {
    /// The default trigger of an agent with an account.
    pub mod default_trigger {
        pub use crate::agents::default_trigger::source;
    }
}

/// The trigger monitors, driven on a manual clock.
pub mod triggers {
    /// The activity monitor.
    pub mod activity {
        pub use crate::triggers::activity::{AccountPoll, ActivityMonitor, FeedSettings, watermark};

        /// Replaying recent activity.
        pub mod replay {
            pub use crate::triggers::activity::replay::replay;
        }
    }

    /// Run-completed chains.
    pub mod chain {
        pub use crate::triggers::chain::{POLL, scan};
    }

    /// Spawning a monitor.
    pub mod monitor {
        pub use crate::triggers::monitor::spawn_with;
    }

    /// The schedule monitor's check.
    pub mod schedule {
        pub use crate::triggers::schedule::check;
    }

    /// A sink that records firings.
    pub mod sink {
        pub use crate::triggers::sink::MemorySink;
    }
}
