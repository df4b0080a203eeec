use fm_devices::{DeviceError, Rank};

/// Errors of the FM API. Each names the rank, device or limit involved.
#[derive(Debug, thiserror::Error)]
pub enum FmError {
    #[error(transparent)]
    Device(#[from] DeviceError),

    #[error(transparent)]
    Composite(#[from] fm_composite::CompositeError),

    #[error("rank {rank} is outside this job of {size} ranks")]
    NoSuchRank { rank: Rank, size: usize },

    #[error("message to rank {dest} declared {declared} bytes but {given} were given")]
    LengthMismatch {
        dest: Rank,
        declared: usize,
        given: usize,
    },

    #[error("message of {len} bytes exceeds the limit of {limit} bytes")]
    TooLong { len: usize, limit: usize },

    #[error("a message to rank {dest} is still open: call end_message first")]
    MessageOpen { dest: Rank },

    #[error("no message is open: call begin_message first")]
    NoMessageOpen,

    #[error("extract was called from inside a handler; handlers may send but not extract")]
    Reentrant,

    #[error("handler ID {id} is registered twice ({first:?} and {second:?})")]
    DuplicateHandler {
        id: u16,
        first: String,
        second: String,
    },

    #[error("environment variable {var}={value:?}: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },

    #[error("configuration: {0}")]
    Config(String),
}

pub type Result<T, E = FmError> = std::result::Result<T, E>;
