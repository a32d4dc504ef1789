//! MongoDB error codes as one table of data, and `CommandError`, the only error type a command handler
//! returns. Every error reply on the wire (`{ok: 0.0, errmsg, code, codeName}`) is built here, so the
//! code/codeName pairs cannot drift apart. Lower layers keep their own error enums and convert into
//! `CommandError` at one place each.

use bson::{doc, Document};

macro_rules! error_codes {
    ($($variant:ident = $code:literal),* $(,)?) => {
        /// A MongoDB server error code. The variant name is the wire `codeName`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $($variant),* }

        impl ErrorCode {
            /// Every code, for tests and for `listCommands`-style introspection.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The numeric code sent as `code`.
            pub const fn code(self) -> i32 {
                match self { $(ErrorCode::$variant => $code),* }
            }

            /// The symbolic name sent as `codeName`.
            pub const fn name(self) -> &'static str {
                match self { $(ErrorCode::$variant => stringify!($variant)),* }
            }
        }
    };
}

error_codes! {
    InternalError = 1,
    BadValue = 2,
    UnknownError = 8,
    FailedToParse = 9,
    Unauthorized = 13,
    TypeMismatch = 14,
    Overflow = 15,
    InvalidLength = 16,
    ProtocolError = 17,
    IllegalOperation = 20,
    InvalidBSON = 22,
    LockBusy = 46,
    NamespaceNotFound = 26,
    IndexNotFound = 27,
    PathNotViable = 28,
    ConflictingUpdateOperators = 40,
    CursorNotFound = 43,
    NamespaceExists = 48,
    MaxTimeMSExpired = 50,
    DollarPrefixedFieldName = 52,
    InvalidIdField = 53,
    NotSingleValueField = 54,
    EmptyFieldName = 56,
    DottedFieldName = 57,
    CommandNotFound = 59,
    ImmutableField = 66,
    CannotCreateIndex = 67,
    IndexAlreadyExists = 68,
    InvalidOptions = 72,
    InvalidNamespace = 73,
    IndexOptionsConflict = 85,
    IndexKeySpecsConflict = 86,
    OperationFailed = 96,
    WriteConflict = 112,
    CommandNotSupported = 115,
    CannotIndexParallelArrays = 171,
    NotImplemented = 238,
    InvalidIndexSpecificationOption = 197,
    ClientMetadataCannotBeMutated = 186,
    NoSuchSession = 206,
    IllegalOpMsgFlag = 223,
    QueryFeatureNotAllowed = 224,
    TooManyDocumentSequences = 233,
    CursorKilled = 237,
    ChecksumMismatch = 288,
    UnsupportedOpQueryCommand = 352,
    NotWritablePrimary = 10107,
    BSONObjectTooLarge = 10334,
    DuplicateKey = 11000,
    InterruptedAtShutdown = 11600,
    Location40414 = 40414,
    Location40415 = 40415,
    Location40430 = 40430,
    Location40431 = 40431,
    Location40432 = 40432,
    Location40433 = 40433,
    Location40571 = 40571,
    Location40587 = 40587,
    Location40621 = 40621,
    Location51251 = 51251,
}

/// The error a command handler returns. `extra` holds fields mongod adds beside `errmsg`
/// (`keyPattern`/`keyValue` for duplicate keys, for example).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{errmsg} ({}: {})", code.code(), code.name())]
pub struct CommandError {
    pub code: ErrorCode,
    pub errmsg: String,
    pub extra: Option<Document>,
}

impl CommandError {
    pub fn new(code: ErrorCode, errmsg: impl Into<String>) -> Self {
        CommandError {
            code,
            errmsg: errmsg.into(),
            extra: None,
        }
    }

    pub fn bad_value(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadValue, errmsg)
    }

    pub fn type_mismatch(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeMismatch, errmsg)
    }

    pub fn internal(errmsg: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, errmsg)
    }

    pub fn with_extra(mut self, extra: Document) -> Self {
        self.extra = Some(extra);
        self
    }

    /// The error reply document: `{ok: 0.0, errmsg, code, codeName, ...extra}`.
    pub fn to_reply(&self) -> Document {
        let mut reply = doc! {
            "ok": 0.0,
            "errmsg": self.errmsg.as_str(),
            "code": self.code.code(),
            "codeName": self.code.name(),
        };
        if let Some(extra) = &self.extra {
            for (key, value) in extra {
                reply.insert(key.clone(), value.clone());
            }
        }
        reply
    }
}

pub type CommandResult<T = Document> = Result<T, CommandError>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_and_names_are_unique() {
        let codes: HashSet<i32> = ErrorCode::ALL.iter().map(|c| c.code()).collect();
        let names: HashSet<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
        assert_eq!(names.len(), ErrorCode::ALL.len());
    }

    #[test]
    fn reply_has_mongod_shape() {
        let err = CommandError::new(ErrorCode::CommandNotFound, "no such command: 'x'")
            .with_extra(doc! {"keyValue": {"a": 1}});
        let reply = err.to_reply();
        assert_eq!(reply.get_f64("ok").unwrap(), 0.0);
        assert_eq!(reply.get_i32("code").unwrap(), 59);
        assert_eq!(reply.get_str("codeName").unwrap(), "CommandNotFound");
        assert_eq!(reply.get_str("errmsg").unwrap(), "no such command: 'x'");
        assert!(reply.get_document("keyValue").is_ok());
    }
}
