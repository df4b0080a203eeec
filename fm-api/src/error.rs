use fm_devices::{DeviceError, Rank};
use std::fmt;

/// An FM error: one pointer wide, so `Result<()>` stays in a register on the
/// hot path (handlers return it for every message). [`FmError::kind`] says
/// what happened.
pub struct FmError(Box<ErrorKind>);

/// What went wrong. Each names the rank, device or limit involved.
#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    #[error(transparent)]
    Device(DeviceError),

    #[error(transparent)]
    Composite(fm_composite::CompositeError),

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

    #[error("resource manager: {0}")]
    Grm(fm_grm::GrmError),

    #[error("group: {0}")]
    Group(String),

    /// A one-sided operation that cannot be, or that its target refused.
    #[error("window: {0}")]
    Window(String),

    #[error("rank {rank} sent {got} bytes for a collective where {want} were expected: do all members make the same calls, with the same root and lengths?")]
    CollectiveMismatch { rank: Rank, got: usize, want: usize },

    #[error("the job has ended: {0}")]
    JobEnded(String),

    /// A handler's own error, passed through `extract`.
    #[error("handler: {0}")]
    Handler(String),

    #[error("no credit or buffer towards rank {dest} now (try again after extract)")]
    WouldBlock { dest: Rank },

    #[error("gave up waiting for {what} after {ms} ms (the wait timeout of this Fm)")]
    Timeout { what: &'static str, ms: u128 },

    #[error("handler {handler} returned with a message to rank {dest} still open; fm aborted that message")]
    HandlerLeftMessageOpen { handler: u16, dest: Rank },

    #[error("rank {src} aborted the message being received (its sender gave it up part way)")]
    Aborted { src: Rank },

    /// The sender began a new message before this one's bytes were all
    /// sent (it broke the protocol): what arrived is all there is.
    #[error(
        "rank {src}'s message of {len} bytes was cut short by its sender after {received} bytes"
    )]
    CutShort {
        src: Rank,
        len: usize,
        received: usize,
    },
}

impl FmError {
    pub fn kind(&self) -> &ErrorKind {
        &self.0
    }

    /// The device error underneath, if this is one.
    pub fn device_error(&self) -> Option<&DeviceError> {
        match &*self.0 {
            ErrorKind::Device(d) => Some(d),
            _ => None,
        }
    }

    /// An error of a handler's own making.
    pub fn handler(msg: impl Into<String>) -> FmError {
        ErrorKind::Handler(msg.into()).into()
    }

    /// Whether this is about one message its handler ran for (the
    /// handler's own error, or a message its sender gave up or cut
    /// short), not about fm or the job: a wait can go on after it.
    pub fn is_handlers(&self) -> bool {
        matches!(
            *self.0,
            ErrorKind::Handler(_)
                | ErrorKind::HandlerLeftMessageOpen { .. }
                | ErrorKind::Aborted { .. }
                | ErrorKind::CutShort { .. }
        )
    }
}

impl From<ErrorKind> for FmError {
    #[cold]
    fn from(k: ErrorKind) -> Self {
        FmError(Box::new(k))
    }
}

impl From<DeviceError> for FmError {
    #[cold]
    fn from(e: DeviceError) -> Self {
        ErrorKind::Device(e).into()
    }
}

impl From<fm_grm::GrmError> for FmError {
    #[cold]
    fn from(e: fm_grm::GrmError) -> Self {
        ErrorKind::Grm(e).into()
    }
}

impl From<fm_composite::CompositeError> for FmError {
    #[cold]
    fn from(e: fm_composite::CompositeError) -> Self {
        ErrorKind::Composite(e).into()
    }
}

impl fmt::Display for FmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The sentence, as Display gives it: `fn main() -> Result<(), FmError>`
/// prints an error it returns with `{:?}`, and a user should read
/// "Error: environment variable FM_CREDITS=…", not a struct. `{:#?}` gives
/// the structure.
impl fmt::Debug for FmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match f.alternate() {
            true => fmt::Debug::fmt(&self.0, f),
            false => fmt::Display::fmt(&self.0, f),
        }
    }
}

impl std::error::Error for FmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.0)
    }
}

pub type Result<T, E = FmError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_debug_prints_as_its_sentence() {
        let e: FmError = ErrorKind::Env {
            var: "FM_CREDITS",
            value: "x".into(),
            reason: "not a number".into(),
        }
        .into();
        assert_eq!(format!("{e:?}"), format!("{e}"));
        assert_eq!(
            format!("{e:?}"),
            "environment variable FM_CREDITS=\"x\": not a number"
        );
        assert!(format!("{e:#?}").contains("Env {"));
    }
}
