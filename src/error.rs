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
    NoSuchKey = 4,
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
    CannotBackfillArray = 34,
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
    ExceededMemoryLimit = 146,
    IncompatibleCollationVersion = 161,
    InvalidPipelineOperator = 168,
    CannotIndexParallelArrays = 171,
    NotImplemented = 238,
    InvalidIndexSpecificationOption = 197,
    ClientMetadataCannotBeMutated = 186,
    NoSuchSession = 206,
    IllegalOpMsgFlag = 223,
    QueryFeatureNotAllowed = 224,
    TooManyDocumentSequences = 233,
    CursorKilled = 237,
    ConversionFailure = 241,
    ChecksumMismatch = 288,
    QueryExceededMemoryLimitNoDiskUseAllowed = 292,
    UnsupportedOpQueryCommand = 352,
    NotWritablePrimary = 10107,
    BSONObjectTooLarge = 10334,
    DuplicateKey = 11000,
    MergeStageNoMatchingDocument = 13113,
    InterruptedAtShutdown = 11600,
    Interrupted = 11601,
    OutOfDiskSpace = 14031,
    Location10065 = 10065,
    Location15947 = 15947,
    Location16990 = 16990,
    Location26823 = 26823,
    Location28745 = 28745,
    Location28746 = 28746,
    Location28747 = 28747,
    Location28748 = 28748,
    Location28749 = 28749,
    Location34344 = 34344,
    Location34345 = 34345,
    Location34346 = 34346,
    Location34347 = 34347,
    Location40169 = 40169,
    Location40170 = 40170,
    Location40171 = 40171,
    Location40600 = 40600,
    Location40601 = 40601,
    Location51047 = 51047,
    Location31465 = 31465,
    Location51132 = 51132,
    Location51134 = 51134,
    Location51178 = 51178,
    Location51181 = 51181,
    Location51183 = 51183,
    Location51185 = 51185,
    Location51186 = 51186,
    Location51187 = 51187,
    Location51191 = 51191,
    Location51199 = 51199,
    Location51273 = 51273,
    Location51153 = 51153,
    Location51154 = 51154,
    Location51246 = 51246,
    Location4910200 = 4910200,
    Location15952 = 15952,
    Location15955 = 15955,
    Location15958 = 15958,
    Location15959 = 15959,
    Location15969 = 15969,
    Location15973 = 15973,
    Location15976 = 15976,
    Location15981 = 15981,
    Location15983 = 15983,
    Location15998 = 15998,
    Location16006 = 16006,
    Location16007 = 16007,
    Location16020 = 16020,
    Location16410 = 16410,
    Location16412 = 16412,
    Location16554 = 16554,
    Location16555 = 16555,
    Location16556 = 16556,
    Location16608 = 16608,
    Location16609 = 16609,
    Location16610 = 16610,
    Location16611 = 16611,
    Location16612 = 16612,
    Location16675 = 16675,
    Location16702 = 16702,
    Location16732 = 16732,
    Location16733 = 16733,
    Location16764 = 16764,
    Location16766 = 16766,
    Location16866 = 16866,
    Location16869 = 16869,
    Location16870 = 16870,
    Location16871 = 16871,
    Location16872 = 16872,
    Location16874 = 16874,
    Location16875 = 16875,
    Location16876 = 16876,
    Location16877 = 16877,
    Location16878 = 16878,
    Location16879 = 16879,
    Location16880 = 16880,
    Location16882 = 16882,
    Location16883 = 16883,
    Location17040 = 17040,
    Location17041 = 17041,
    Location17042 = 17042,
    Location17043 = 17043,
    Location17044 = 17044,
    Location17045 = 17045,
    Location17046 = 17046,
    Location17047 = 17047,
    Location17048 = 17048,
    Location17049 = 17049,
    Location50989 = 50989,
    Location51044 = 51044,
    Location51045 = 51045,
    Location17080 = 17080,
    Location17081 = 17081,
    Location17082 = 17082,
    Location17083 = 17083,
    Location17124 = 17124,
    Location17261 = 17261,
    Location17262 = 17262,
    Location17276 = 17276,
    Location18533 = 18533,
    Location18534 = 18534,
    Location18535 = 18535,
    Location18536 = 18536,
    Location18537 = 18537,
    Location18628 = 18628,
    Location18629 = 18629,
    Location28646 = 28646,
    Location28647 = 28647,
    Location28648 = 28648,
    Location28650 = 28650,
    Location28651 = 28651,
    Location28664 = 28664,
    Location28667 = 28667,
    Location28680 = 28680,
    Location28689 = 28689,
    Location28690 = 28690,
    Location28691 = 28691,
    Location28724 = 28724,
    Location28725 = 28725,
    Location28726 = 28726,
    Location28727 = 28727,
    Location28728 = 28728,
    Location28729 = 28729,
    Location28765 = 28765,
    Location28808 = 28808,
    Location28809 = 28809,
    Location28810 = 28810,
    Location28811 = 28811,
    Location28812 = 28812,
    Location28818 = 28818,
    Location28822 = 28822,
    Location31002 = 31002,
    Location31119 = 31119,
    Location31120 = 31120,
    Location31253 = 31253,
    Location31254 = 31254,
    Location31303 = 31303,
    Location34435 = 34435,
    Location34450 = 34450,
    Location34451 = 34451,
    Location34452 = 34452,
    Location34453 = 34453,
    Location34454 = 34454,
    Location34455 = 34455,
    Location34471 = 34471,
    Location16034 = 16034,
    Location16035 = 16035,
    Location28656 = 28656,
    Location28657 = 28657,
    Location34473 = 34473,
    Location40091 = 40091,
    Location40092 = 40092,
    Location40093 = 40093,
    Location40094 = 40094,
    Location40096 = 40096,
    Location40097 = 40097,
    Location50752 = 50752,
    Location31022 = 31022,
    Location31023 = 31023,
    Location31024 = 31024,
    Location51103 = 51103,
    Location51104 = 51104,
    Location51105 = 51105,
    Location51106 = 51106,
    Location51107 = 51107,
    Location51108 = 51108,
    Location51109 = 51109,
    Location51110 = 51110,
    Location51111 = 51111,
    Location51151 = 51151,
    Location51744 = 51744,
    Location51745 = 51745,
    Location51746 = 51746,
    Location51747 = 51747,
    Location51748 = 51748,
    Location51749 = 51749,
    Location51750 = 51750,
    Location51751 = 51751,
    Location40060 = 40060,
    Location40061 = 40061,
    Location40062 = 40062,
    Location40063 = 40063,
    Location40064 = 40064,
    Location40065 = 40065,
    Location40066 = 40066,
    Location40067 = 40067,
    Location40068 = 40068,
    Location40081 = 40081,
    Location40085 = 40085,
    Location40086 = 40086,
    Location40087 = 40087,
    Location40148 = 40148,
    Location40149 = 40149,
    Location40156 = 40156,
    Location40157 = 40157,
    Location40158 = 40158,
    Location40159 = 40159,
    Location40160 = 40160,
    Location40228 = 40228,
    Location40191 = 40191,
    Location40192 = 40192,
    Location40193 = 40193,
    Location40194 = 40194,
    Location40195 = 40195,
    Location40196 = 40196,
    Location40197 = 40197,
    Location40198 = 40198,
    Location40199 = 40199,
    Location40200 = 40200,
    Location40201 = 40201,
    Location40202 = 40202,
    Location40234 = 40234,
    Location40235 = 40235,
    Location40236 = 40236,
    Location40237 = 40237,
    Location40238 = 40238,
    Location40272 = 40272,
    Location40323 = 40323,
    Location40324 = 40324,
    Location40400 = 40400,
    Location40414 = 40414,
    Location40415 = 40415,
    Location51198 = 51198,
    Location5788001 = 5788001,
    Location5788002 = 5788002,
    Location5788003 = 5788003,
    Location5788004 = 5788004,
    Location5788005 = 5788005,
    Location7934201 = 7934201,
    Location40218 = 40218,
    Location17313 = 17313,
    Location40430 = 40430,
    Location40431 = 40431,
    Location40432 = 40432,
    Location40433 = 40433,
    Location40517 = 40517,
    Location40535 = 40535,
    Location40539 = 40539,
    Location40571 = 40571,
    Location40587 = 40587,
    Location40602 = 40602,
    Location40621 = 40621,
    Location50694 = 50694,
    Location50695 = 50695,
    Location50696 = 50696,
    Location50699 = 50699,
    Location50700 = 50700,
    Location50784 = 50784,
    Location51024 = 51024,
    Location51081 = 51081,
    Location51082 = 51082,
    Location51083 = 51083,
    Location51251 = 51251,
    Location51272 = 51272,
    Location327391 = 327391,
    Location1257300 = 1257300,
    Location3041701 = 3041701,
    Location3041702 = 3041702,
    Location3041703 = 3041703,
    Location3041704 = 3041704,
    Location51074 = 51074,
    Location51075 = 51075,
    Location4890500 = 4890500,
    Location5107200 = 5107200,
    Location5787801 = 5787801,
    Location5787900 = 5787900,
    Location5787901 = 5787901,
    Location5787902 = 5787902,
    Location5787903 = 5787903,
    Location5787906 = 5787906,
    Location5787907 = 5787907,
    Location5787908 = 5787908,
    Location5107201 = 5107201,
    Location5255100 = 5255100,
    Location5654602 = 5654602,
    Location4161100 = 4161100,
    Location4161101 = 4161101,
    Location4161102 = 4161102,
    Location4161103 = 4161103,
    Location4161105 = 4161105,
    Location4161106 = 4161106,
    Location4161107 = 4161107,
    Location4161108 = 4161108,
    Location4161109 = 4161109,
    Location5729100 = 5729100,
    Location7749501 = 7749501,
    Location5858203 = 5858203,
    Location40075 = 40075,
    Location40076 = 40076,
    Location40077 = 40077,
    Location40078 = 40078,
    Location40079 = 40079,
    Location40080 = 40080,
    Location34460 = 34460,
    Location34461 = 34461,
    Location34462 = 34462,
    Location34463 = 34463,
    Location34464 = 34464,
    Location34465 = 34465,
    Location34466 = 34466,
    Location34467 = 34467,
    Location34468 = 34468,
    Location34443 = 34443,
    Location34444 = 34444,
    Location34445 = 34445,
    Location34446 = 34446,
    Location34447 = 34447,
    Location34448 = 34448,
    Location34449 = 34449,
    Location40090 = 40090,
    Location2942500 = 2942500,
    Location2942501 = 2942501,
    Location2942502 = 2942502,
    Location2942503 = 2942503,
    Location2942504 = 2942504,
    Location2942506 = 2942506,
    Location5788200 = 5788200,
    Location40386 = 40386,
    Location40390 = 40390,
    Location40391 = 40391,
    Location40392 = 40392,
    Location40393 = 40393,
    Location40394 = 40394,
    Location40395 = 40395,
    Location40396 = 40396,
    Location40397 = 40397,
    Location40398 = 40398,
    Location4940400 = 4940400,
    Location4940401 = 4940401,
    Location28714 = 28714,
    Location28756 = 28756,
    Location28757 = 28757,
    Location28758 = 28758,
    Location28759 = 28759,
    Location28761 = 28761,
    Location28762 = 28762,
    Location28763 = 28763,
    Location28764 = 28764,
    Location28766 = 28766,
    Location3040501 = 3040501,
    Location31393 = 31393,
    Location51276 = 51276,
    Location5687301 = 5687301,
    Location5687302 = 5687302,
    Location7429703 = 7429703,
    Location7436100 = 7436100,
    Location7436200 = 7436200,
    Location7436201 = 7436201,
    Location7750300 = 7750300,
    Location7750301 = 7750301,
    Location7750302 = 7750302,
    Location7750303 = 7750303,
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

    /// The same error with mongod's context prefix: `<context> :: caused by :: <errmsg>`.
    pub fn caused(self, context: &str) -> Self {
        CommandError {
            errmsg: format!("{context} :: caused by :: {}", self.errmsg),
            ..self
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
