//! Every command's arguments as one table of data, from mongod's IDL (7.0, plus 8.0's `bulkWrite`
//! and update statements' `sort`): each field's type, whether it is required, its allowed range,
//! and what tideway does with it — uses it, ignores it because mongod's meaning makes it a no-op
//! here, or refuses it (238 NotImplemented) rather than silently dropping what it asks for.
//! [`validate`] checks a command body against its entry before the handler runs, with mongod's
//! codes and messages: unknown fields of strict commands 40415, wrong types 14, missing required
//! fields 40414, out-of-range values 51024.
//!
//! Invariants: the command's own first field and generic arguments (`dispatch::GENERIC_ARGUMENTS`)
//! are not described here (handlers and dispatch check those); `null` (and `undefined`) for an
//! optional typed field means absent, as in mongod's generated parsers; every registered command
//! has an entry (a test checks it).

use bson::{Bson, Document};

use tideway_base::bsonutil::as_f64;
use tideway_base::display::{type_name, value_string};
use tideway_base::error::{CommandError, CommandResult, ErrorCode};

/// The BSON types a field accepts, as mongod's IDL types name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// Checked by the handler (variants, custom parsers such as `hint` or `countLimit`).
    Any,
    /// `safeInt64`/`safeInt`: any number.
    Number,
    /// `safeBool`: a boolean or a number.
    SafeBool,
    /// `bool`: a boolean only.
    Bool,
    /// `optionalBool`: a boolean only, with its own message.
    OptionalBool,
    Int,
    Long,
    /// `double`: a BSON double only.
    Double,
    Str,
    Object,
    Array,
    /// An array of documents, each described by its own fields (`updates`, `deletes`).
    Entries(&'static Args),
    /// An array of documents of several kinds, each described by the fields of the kind its first
    /// field names (`bulkWrite`'s `ops`: `insert`, `update`, `delete`).
    Variant(&'static [(&'static str, &'static Args)]),
    /// A document described by its own fields (an IDL struct: `create.indexOptionDefaults`).
    Struct(&'static Args),
}

impl ArgType {
    fn accepts(self, value: &Bson) -> bool {
        let number = matches!(
            value,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
        );
        match self {
            ArgType::Any => true,
            ArgType::Number => number,
            ArgType::SafeBool => number || matches!(value, Bson::Boolean(_)),
            ArgType::Bool | ArgType::OptionalBool => matches!(value, Bson::Boolean(_)),
            ArgType::Int => matches!(value, Bson::Int32(_)),
            ArgType::Long => matches!(value, Bson::Int64(_)),
            ArgType::Double => matches!(value, Bson::Double(_)),
            ArgType::Str => matches!(value, Bson::String(_)),
            ArgType::Object | ArgType::Struct(_) => matches!(value, Bson::Document(_)),
            ArgType::Array | ArgType::Entries(_) | ArgType::Variant(_) => {
                matches!(value, Bson::Array(_))
            }
        }
    }

    /// mongod's "expected type(s)" clause, quirks included (the quote after `]` is mongod's).
    fn expected(self) -> &'static str {
        match self {
            ArgType::Any => "",
            ArgType::Number => "expected types '[long, int, decimal, double']",
            ArgType::SafeBool => "expected types '[bool, long, int, decimal, double']",
            ArgType::Bool | ArgType::OptionalBool => "expected type 'bool'",
            ArgType::Int => "expected type 'int'",
            ArgType::Long => "expected type 'long'",
            ArgType::Double => "expected type 'double'",
            ArgType::Str => "expected type 'string'",
            ArgType::Object | ArgType::Struct(_) => "expected type 'object'",
            ArgType::Array | ArgType::Entries(_) | ArgType::Variant(_) => "expected type 'array'",
        }
    }
}

/// What tideway does with a field mongod knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// The handler honours it.
    Honoured,
    /// Accepted and without effect, as on a standalone mongod (e.g. shard and replication
    /// internals).
    NoOp,
    /// Not implemented: present with any value other than null, false or `{}`, it is refused.
    Refused,
}

/// One field of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arg {
    pub name: &'static str,
    pub ty: ArgType,
    pub required: bool,
    /// mongod's `gte` validator.
    pub min: Option<i64>,
    pub use_: Use,
}

const fn arg(name: &'static str, ty: ArgType) -> Arg {
    Arg {
        name,
        ty,
        required: false,
        min: None,
        use_: Use::Honoured,
    }
}

const fn required(name: &'static str, ty: ArgType) -> Arg {
    Arg {
        required: true,
        ..arg(name, ty)
    }
}

const fn at_least(name: &'static str, min: i64) -> Arg {
    Arg {
        min: Some(min),
        ..arg(name, ArgType::Number)
    }
}

const fn no_op(name: &'static str, ty: ArgType) -> Arg {
    Arg {
        use_: Use::NoOp,
        ..arg(name, ty)
    }
}

const fn refused(name: &'static str, ty: ArgType) -> Arg {
    Arg {
        use_: Use::Refused,
        ..arg(name, ty)
    }
}

/// A command's fields; `strict` commands refuse fields they do not list (40415).
#[derive(Debug, PartialEq, Eq)]
pub struct Args {
    pub strict: bool,
    pub fields: &'static [Arg],
}

impl Args {
    pub fn field(&self, name: &str) -> Option<&'static Arg> {
        self.fields.iter().find(|arg| arg.name == name)
    }
}

use ArgType::{Any, Array, Bool, Int, Long, Number, Object, OptionalBool, SafeBool, Str};

/// Fields every write command shares (`write_ops.idl`).
macro_rules! write_command_fields {
    ($($field:expr),* $(,)?) => {
        &[
            $($field,)*
            arg("ordered", Bool),
            arg("bypassDocumentValidation", SafeBool),
            refused("runtimeConstants", Object),
            no_op("stmtId", Int),
            no_op("stmtIds", Array),
            no_op("isTimeseriesNamespace", OptionalBool),
            refused("collectionUUID", Any),
            refused("encryptionInformation", Object),
            no_op("bypassEmptyTsReplacement", OptionalBool),
        ]
    };
}

const FIND: Args = Args {
    strict: true,
    fields: &[
        arg("filter", Object),
        arg("projection", Object),
        arg("sort", Object),
        arg("hint", Any),
        arg("collation", Object),
        at_least("skip", 0),
        at_least("limit", 0),
        at_least("batchSize", 0),
        arg("singleBatch", OptionalBool),
        arg("allowDiskUse", OptionalBool),
        refused("min", Object),
        refused("max", Object),
        refused("returnKey", OptionalBool),
        refused("showRecordId", OptionalBool),
        arg("tailable", OptionalBool),
        no_op("oplogReplay", Any),
        arg("noCursorTimeout", OptionalBool),
        arg("awaitData", OptionalBool),
        no_op("allowPartialResults", OptionalBool),
        arg("let", Object),
        no_op("readOnce", OptionalBool),
        no_op("allowSpeculativeMajorityRead", OptionalBool),
        no_op("term", Number),
        refused("$_requestResumeToken", OptionalBool),
        refused("$_resumeAfter", Object),
        refused("$_startAt", Object),
        refused("collectionUUID", Any),
        refused("encryptionInformation", Object),
        refused("runtimeConstants", Object),
        no_op("mirrored", OptionalBool),
        no_op("sampleId", Any),
    ],
};

const GET_MORE: Args = Args {
    strict: true,
    fields: &[
        required("collection", Str),
        at_least("batchSize", 0),
        no_op("term", Long),
        no_op("lastKnownCommittedOpTime", Object),
    ],
};

const KILL_CURSORS: Args = Args {
    strict: true,
    fields: &[required("cursors", Array)],
};

const COUNT: Args = Args {
    strict: true,
    fields: &[
        arg("query", Object),
        arg("limit", Any),
        at_least("skip", 0),
        arg("hint", Any),
        arg("collation", Object),
        no_op("fields", Object),
        no_op("$queryOptions", Object),
        refused("encryptionInformation", Object),
        no_op("mirrored", OptionalBool),
        no_op("sampleId", Any),
    ],
};

const DISTINCT: Args = Args {
    strict: true,
    fields: &[
        required("key", Str),
        arg("query", Object),
        arg("collation", Object),
        arg("hint", Any),
        no_op("mirrored", OptionalBool),
        no_op("sampleId", Any),
    ],
};

/// mongod's `explain` IDL: the explained command is the command field itself.
const EXPLAIN: Args = Args {
    strict: true,
    fields: &[arg("verbosity", Str)],
};

const AGGREGATE: Args = Args {
    strict: true,
    fields: &[
        required("pipeline", Array),
        arg("explain", Any),
        arg("allowDiskUse", OptionalBool),
        arg("cursor", Object),
        arg("bypassDocumentValidation", SafeBool),
        arg("collation", Object),
        arg("hint", Any),
        arg("let", Object),
        no_op("needsMerge", OptionalBool),
        no_op("fromMongos", OptionalBool),
        no_op("$queryOptions", Object),
        refused("exchange", Object),
        refused("runtimeConstants", Object),
        no_op("isMapReduceCommand", OptionalBool),
        refused("collectionUUID", Any),
        refused("encryptionInformation", Object),
        no_op("$_generateV2ResumeTokens", OptionalBool),
        refused("$_passthroughToShard", Object),
        refused("$_requestReshardingResumeToken", OptionalBool),
    ],
};

const INSERT: Args = Args {
    strict: true,
    fields: write_command_fields![required("documents", Array)],
};

/// One `updates` entry (`UpdateOpEntry`).
const UPDATE_ENTRY: Args = Args {
    strict: true,
    fields: &[
        required("q", Object),
        required("u", Any),
        arg("sort", Object),
        arg("c", Object),
        arg("arrayFilters", Array),
        arg("hint", Any),
        arg("multi", Bool),
        arg("upsert", Bool),
        no_op("upsertSupplied", OptionalBool),
        arg("collation", Object),
        no_op("sampleId", Any),
        no_op(
            "$_allowShardKeyUpdatesWithoutFullShardKeyInQuery",
            OptionalBool,
        ),
    ],
};

const UPDATE: Args = Args {
    strict: true,
    fields: write_command_fields![
        required("updates", ArgType::Entries(&UPDATE_ENTRY)),
        arg("let", Object),
    ],
};

/// One `deletes` entry (`DeleteOpEntry`); `limit` is read as a number, 0 or 1 (the handler).
const DELETE_ENTRY: Args = Args {
    strict: true,
    fields: &[
        required("q", Object),
        required("limit", Any),
        arg("hint", Any),
        arg("collation", Object),
        no_op("sampleId", Any),
    ],
};

const DELETE: Args = Args {
    strict: true,
    fields: write_command_fields![
        required("deletes", ArgType::Entries(&DELETE_ENTRY)),
        arg("let", Object),
    ],
};

const FIND_AND_MODIFY: Args = Args {
    strict: true,
    fields: &[
        arg("query", Object),
        arg("fields", Object),
        arg("sort", Object),
        no_op("batchSize", Int),
        no_op("singleBatch", Bool),
        arg("hint", Any),
        arg("collation", Object),
        arg("arrayFilters", Array),
        arg("remove", SafeBool),
        arg("update", Any),
        arg("upsert", SafeBool),
        arg("new", SafeBool),
        no_op("stmtId", Int),
        arg("bypassDocumentValidation", SafeBool),
        arg("let", Object),
        refused("runtimeConstants", Object),
        refused("encryptionInformation", Object),
        no_op("bypassEmptyTsReplacement", OptionalBool),
        no_op("sampleId", Any),
        no_op("$_originalQuery", Object),
        no_op("$_originalCollation", Object),
    ],
};

/// One `nsInfo` entry of `bulkWrite` (`NamespaceInfoEntry`); the handler checks `ns`.
const BULK_WRITE_NS_INFO: Args = Args {
    strict: true,
    fields: &[
        required("ns", Str),
        refused("collectionUUID", Any),
        refused("encryptionInformation", Object),
        arg("isTimeseriesNamespace", OptionalBool),
        no_op("shardVersion", Any),
        no_op("databaseVersion", Any),
    ],
};

/// `bulkWrite`'s insert op (`BulkWriteInsertOp`); the handler checks the `nsInfo` index.
const BULK_WRITE_INSERT: Args = Args {
    strict: true,
    fields: &[required("insert", Number), required("document", Object)],
};

/// `bulkWrite`'s update op (`BulkWriteUpdateOp`); the handler checks the index, `updateMods`
/// and `hint`.
const BULK_WRITE_UPDATE: Args = Args {
    strict: true,
    fields: &[
        required("update", Number),
        required("filter", Object),
        arg("sort", Object),
        arg("multi", Bool),
        required("updateMods", Any),
        arg("upsert", Bool),
        arg("upsertSupplied", OptionalBool),
        arg("arrayFilters", Array),
        arg("hint", Any),
        arg("constants", Object),
        arg("collation", Object),
        no_op("sampleId", Any),
        no_op(
            "$_allowShardKeyUpdatesWithoutFullShardKeyInQuery",
            OptionalBool,
        ),
    ],
};

/// `bulkWrite`'s delete op (`BulkWriteDeleteOp`).
const BULK_WRITE_DELETE: Args = Args {
    strict: true,
    fields: &[
        required("delete", Number),
        required("filter", Object),
        arg("multi", Bool),
        arg("hint", Any),
        arg("collation", Object),
        no_op("sampleId", Any),
    ],
};

const BULK_WRITE: Args = Args {
    strict: true,
    fields: &[
        required(
            "ops",
            ArgType::Variant(&[
                ("insert", &BULK_WRITE_INSERT),
                ("update", &BULK_WRITE_UPDATE),
                ("delete", &BULK_WRITE_DELETE),
            ]),
        ),
        required("nsInfo", ArgType::Entries(&BULK_WRITE_NS_INFO)),
        arg("cursor", Object),
        arg("bypassDocumentValidation", SafeBool),
        arg("ordered", Bool),
        // Per-op statement ids of a retryable write (`bulk_write::read_stmt_ids` checks them).
        arg("stmtIds", Array),
        arg("let", Object),
        arg("errorsOnly", Bool),
        no_op("bypassEmptyTsReplacement", OptionalBool),
        no_op("$_originalQuery", Object),
        no_op("$_originalCollation", Object),
    ],
};

/// mongod's `IndexOptionDefaults` (collection_options.idl).
const INDEX_OPTION_DEFAULTS: Args = Args {
    strict: true,
    fields: &[arg("storageEngine", Object)],
};

/// mongod's `ChangeStreamPreAndPostImagesOptions` (change_stream_pre_and_post_images.idl).
const CHANGE_STREAM_PRE_AND_POST_IMAGES: Args = Args {
    strict: true,
    fields: &[required("enabled", Bool)],
};

const CREATE: Args = Args {
    strict: true,
    // The handler refuses the collection kinds tideway lacks with mongod's or its own errors.
    fields: &[
        arg("capped", SafeBool),
        no_op("autoIndexId", SafeBool),
        arg("idIndex", Object),
        arg("size", Number),
        arg("max", Number),
        arg("storageEngine", Object),
        arg("validator", Object),
        arg("validationLevel", Str),
        arg("validationAction", Str),
        arg(
            "indexOptionDefaults",
            ArgType::Struct(&INDEX_OPTION_DEFAULTS),
        ),
        arg("viewOn", Str),
        arg("pipeline", Array),
        arg("collation", Object),
        arg(
            "changeStreamPreAndPostImages",
            ArgType::Struct(&CHANGE_STREAM_PRE_AND_POST_IMAGES),
        ),
        arg("timeseries", Object),
        arg("clusteredIndex", Any),
        arg("expireAfterSeconds", Number),
        arg("encryptedFields", Object),
        no_op("temp", SafeBool),
        no_op("flags", Number),
    ],
};

const DROP: Args = Args {
    strict: true,
    fields: &[refused("collectionUUID", Any)],
};

/// `commitTransaction`/`abortTransaction` (txn_cmds.idl): a `recoveryToken` (for mongos, accepted
/// and ignored by a replica set, as mongod); a commit's `commitTimestamp` is for prepared
/// transactions, which a one-node set never has.
const COMMIT_TRANSACTION: Args = Args {
    strict: true,
    fields: &[
        no_op("recoveryToken", Object),
        refused("commitTimestamp", Any),
    ],
};

const ABORT_TRANSACTION: Args = Args {
    strict: true,
    fields: &[no_op("recoveryToken", Object)],
};

const NO_FIELDS: Args = Args {
    strict: true,
    fields: &[],
};

/// Commands whose parsers ignore what they do not know (mongod's non-strict commands).
const LOOSE: Args = Args {
    strict: false,
    fields: &[],
};

const LIST_DATABASES: Args = Args {
    strict: true,
    fields: &[
        arg("nameOnly", SafeBool),
        arg("authorizedDatabases", Bool),
        arg("filter", Object),
    ],
};

const LIST_COLLECTIONS: Args = Args {
    strict: true,
    fields: &[
        arg("cursor", Object),
        arg("filter", Object),
        arg("nameOnly", Bool),
        arg("authorizedCollections", Bool),
        no_op("includePendingDrops", SafeBool),
    ],
};

const LIST_INDEXES: Args = Args {
    strict: true,
    fields: &[
        arg("cursor", Object),
        no_op("includeBuildUUIDs", SafeBool),
        no_op("includeIndexBuildInfo", SafeBool),
        no_op("isTimeseriesNamespace", Bool),
    ],
};

const CREATE_INDEXES: Args = Args {
    strict: true,
    fields: &[
        required("indexes", Array),
        no_op("v", Number),
        refused("ignoreUnknownIndexOptions", SafeBool),
        no_op("commitQuorum", Any),
        no_op("returnOnStart", OptionalBool),
        no_op("isTimeseriesNamespace", Bool),
        refused("collectionUUID", Any),
    ],
};

const DROP_INDEXES: Args = Args {
    strict: true,
    fields: &[
        required("index", Any),
        no_op("isTimeseriesNamespace", Bool),
        refused("collectionUUID", Any),
    ],
};

const COLL_MOD: Args = Args {
    strict: true,
    fields: &[
        arg("index", Object),
        arg("validator", Object),
        arg("validationLevel", Str),
        arg("validationAction", Str),
        // A view's definition (`commands::views`).
        arg("viewOn", Str),
        arg("pipeline", Array),
        refused("recordPreImages", SafeBool),
        arg(
            "changeStreamPreAndPostImages",
            ArgType::Struct(&CHANGE_STREAM_PRE_AND_POST_IMAGES),
        ),
        arg("expireAfterSeconds", Any),
        arg("timeseries", Object),
        refused("dryRun", SafeBool),
        refused("collectionUUID", Any),
        arg("cappedSize", Number),
        arg("cappedMax", Number),
    ],
};

const RENAME_COLLECTION: Args = Args {
    strict: true,
    fields: &[
        required("to", Str),
        arg("dropTarget", Any),
        no_op("stayTemp", Bool),
        refused("collectionUUID", Any),
    ],
};

const DB_STATS: Args = Args {
    strict: true,
    fields: &[at_least("scale", 1), no_op("freeStorage", SafeBool)],
};

const COLL_STATS: Args = Args {
    strict: false,
    fields: &[at_least("scale", 1)],
};

const HELLO: Args = Args {
    strict: false,
    fields: &[
        arg("forShell", SafeBool),
        arg("hostInfo", Str),
        arg("hangUpOnStepDown", SafeBool),
        arg("internalClient", Object),
        arg("client", Object),
        arg("topologyVersion", Object),
        at_least("maxAwaitTimeMS", 0),
        arg("helloOk", SafeBool),
        arg("compression", Array),
        arg("saslSupportedMechs", Any),
        arg("speculativeAuthenticate", Object),
        arg("loadBalanced", Bool),
    ],
};

/// `profile` (`profile.idl`, not strict); the handler checks the level and `filter`.
const PROFILE: Args = Args {
    strict: false,
    fields: &[
        arg("slowms", Number),
        arg("sampleRate", ArgType::Double),
        arg("filter", Any),
    ],
};

const CONNECTION_STATUS: Args = Args {
    strict: true,
    fields: &[arg("showPrivileges", SafeBool)],
};

/// `saslStart` (`sasl_commands.idl`); the handler reads the payload (BinData or base64 string).
const SASL_START: Args = Args {
    strict: false,
    fields: &[
        required("mechanism", Str),
        required("payload", Any),
        arg("autoAuthorize", Any),
        arg("options", Object),
    ],
};

/// `authenticate` (`authentication_commands.idl`, strict).
const AUTHENTICATE: Args = Args {
    strict: true,
    fields: &[required("mechanism", Str), arg("user", Str)],
};

/// `rotateCertificates` (`rotate_certificates.idl`).
const ROTATE_CERTIFICATES: Args = Args {
    strict: true,
    fields: &[arg("message", Str)],
};

const SASL_CONTINUE: Args = Args {
    strict: false,
    fields: &[required("conversationId", Number), required("payload", Any)],
};

/// `createUser` (`user_management_commands.idl`, strict).
const CREATE_USER: Args = Args {
    strict: true,
    fields: &[
        arg("pwd", Str),
        arg("customData", Object),
        required("roles", Array),
        arg("digestPassword", Bool),
        refused("authenticationRestrictions", Array),
        arg("mechanisms", Array),
    ],
};

const UPDATE_USER: Args = Args {
    strict: true,
    fields: &[
        arg("pwd", Str),
        arg("customData", Object),
        arg("roles", Array),
        arg("digestPassword", Bool),
        refused("authenticationRestrictions", Array),
        arg("mechanisms", Array),
    ],
};

/// `grantRolesToUser` / `revokeRolesFromUser`.
const USER_ROLES: Args = Args {
    strict: true,
    fields: &[required("roles", Array)],
};

const USERS_INFO: Args = Args {
    strict: true,
    fields: &[
        arg("showCredentials", SafeBool),
        arg("showCustomData", SafeBool),
        arg("showPrivileges", SafeBool),
        arg("showAuthenticationRestrictions", SafeBool),
        refused("filter", Object),
    ],
};

/// `createRole` (`user_management_commands.idl`, strict); the handler parses each privilege and
/// refuses a non-empty `authenticationRestrictions` (tideway enforces none).
const CREATE_ROLE: Args = Args {
    strict: true,
    fields: &[
        required("privileges", Array),
        required("roles", Array),
        arg("authenticationRestrictions", Array),
    ],
};

const UPDATE_ROLE: Args = Args {
    strict: true,
    fields: &[
        arg("privileges", Array),
        arg("roles", Array),
        arg("authenticationRestrictions", Array),
    ],
};

/// `grantPrivilegesToRole` / `revokePrivilegesFromRole`.
const ROLE_PRIVILEGES: Args = Args {
    strict: true,
    fields: &[required("privileges", Array)],
};

/// `rolesInfo`; `showPrivileges` is a boolean or `"asUserFragment"` (the handler checks it).
const ROLES_INFO: Args = Args {
    strict: true,
    fields: &[
        arg("showPrivileges", Any),
        arg("showBuiltinRoles", SafeBool),
        arg("showAuthenticationRestrictions", SafeBool),
    ],
};

/// `mapReduce` (`map_reduce.idl`, strict): its handler checks every field, since mongod's
/// messages name the command `MapReduce`.
const MAP_REDUCE: Args = Args {
    strict: false,
    fields: &[
        arg("map", Any),
        arg("reduce", Any),
        arg("out", Any),
        arg("query", Any),
        arg("sort", Any),
        arg("collation", Any),
        arg("limit", Any),
        arg("finalize", Any),
        arg("scope", Any),
        no_op("verbose", Any),
        no_op("bypassDocumentValidation", Any),
        no_op("jsMode", Any),
    ],
};

/// The argument description of a registered command (by canonical name).
pub fn args_for(command: &str) -> Option<&'static Args> {
    Some(match command {
        "find" => &FIND,
        "getMore" => &GET_MORE,
        "killCursors" => &KILL_CURSORS,
        "count" => &COUNT,
        "distinct" => &DISTINCT,
        "aggregate" => &AGGREGATE,
        "mapReduce" => &MAP_REDUCE,
        "explain" => &EXPLAIN,
        "insert" => &INSERT,
        "update" => &UPDATE,
        "delete" => &DELETE,
        "findAndModify" => &FIND_AND_MODIFY,
        "bulkWrite" => &BULK_WRITE,
        "create" => &CREATE,
        "drop" => &DROP,
        "dropDatabase" | "endSessions" | "refreshSessions" | "ping" | "hostInfo"
        | "getCmdLineOpts" | "getLog" => &NO_FIELDS,
        "listDatabases" => &LIST_DATABASES,
        "listCollections" => &LIST_COLLECTIONS,
        "listIndexes" => &LIST_INDEXES,
        "createIndexes" => &CREATE_INDEXES,
        "dropIndexes" => &DROP_INDEXES,
        "collMod" => &COLL_MOD,
        "renameCollection" => &RENAME_COLLECTION,
        "dbStats" => &DB_STATS,
        "collStats" => &COLL_STATS,
        "hello" | "isMaster" => &HELLO,
        "connectionStatus" => &CONNECTION_STATUS,
        "profile" => &PROFILE,
        "killSessions" | "killAllSessions" | "startSession" | "buildInfo" | "listCommands"
        | "whatsmyuri" | "serverStatus" | "getParameter" | "setParameter" | "advanceClock"
        | "runTtlPass" | "currentOp" | "killOp" | "sleep" => &LOOSE,
        // mongod's BasicCommand, whose other fields are ignored.
        "refreshLogicalSessionCacheNow" => &LOOSE,
        // mongod's `collection_to_capped.cpp` commands read their fields by hand and ignore others.
        "convertToCapped" | "cloneCollectionAsCapped" => &LOOSE,
        // Replica-set mode (`repl::commands`): their fields are read loosely, as mongod.
        "replSetInitiate" | "replSetGetStatus" | "replSetGetConfig" | "replSetStepDown" => &LOOSE,
        "saslStart" => &SASL_START,
        "saslContinue" => &SASL_CONTINUE,
        "authenticate" => &AUTHENTICATE,
        "rotateCertificates" => &ROTATE_CERTIFICATES,
        "createUser" => &CREATE_USER,
        "updateUser" => &UPDATE_USER,
        "grantRolesToUser" | "revokeRolesFromUser" | "grantRolesToRole" | "revokeRolesFromRole" => {
            &USER_ROLES
        }
        "createRole" => &CREATE_ROLE,
        "updateRole" => &UPDATE_ROLE,
        "grantPrivilegesToRole" | "revokePrivilegesFromRole" => &ROLE_PRIVILEGES,
        "rolesInfo" => &ROLES_INFO,
        "dropRole" | "dropAllRolesFromDatabase" => &NO_FIELDS,
        "usersInfo" => &USERS_INFO,
        "dropUser" | "dropAllUsersFromDatabase" | "logout" => &NO_FIELDS,
        "commitTransaction" => &COMMIT_TRANSACTION,
        "abortTransaction" => &ABORT_TRANSACTION,
        _ => return None,
    })
}

fn is_absent(value: &Bson) -> bool {
    matches!(value, Bson::Null | Bson::Undefined)
}

/// Checks `body`'s fields against the description of `command`.
pub(crate) fn validate(command: &str, args: &Args, body: &Document) -> CommandResult<()> {
    validate_fields(
        command,
        args,
        tideway_base::command::command_fields(body),
        body,
    )
}

/// Checks `fields` (of `document`) against `args`; `context` names them in messages, as
/// mongod's parser does (`find`, `update.updates`).
fn validate_fields<'d>(
    context: &str,
    args: &Args,
    fields: impl Iterator<Item = (&'d std::string::String, &'d Bson)>,
    document: &Document,
) -> CommandResult<()> {
    for (name, value) in fields {
        let Some(arg) = args.field(name) else {
            if args.strict {
                return Err(CommandError::new(
                    ErrorCode::Location40415,
                    format!("BSON field '{context}.{name}' is an unknown field."),
                ));
            }
            continue;
        };
        if is_absent(value) && arg.ty != ArgType::OptionalBool {
            continue;
        }
        if !arg.ty.accepts(value) {
            let message = if arg.ty == ArgType::OptionalBool {
                format!(
                    "Field '{name}' should be a boolean value, but found: {}",
                    type_name(value)
                )
            } else {
                format!(
                    "BSON field '{context}.{name}' is the wrong type '{}', {}",
                    type_name(value),
                    arg.ty.expected()
                )
            };
            return Err(CommandError::type_mismatch(message));
        }
        if let (Some(min), Some(number)) = (arg.min, as_f64(value)) {
            if number < min as f64 || number.is_nan() {
                return Err(CommandError::new(
                    ErrorCode::Location51024,
                    format!(
                        "BSON field '{context}.{name}' value must be >= {min}, actual value '{}'",
                        value_string(value)
                    ),
                ));
            }
        }
        if arg.use_ == Use::Refused && !is_inert(value) {
            return Err(CommandError::new(
                ErrorCode::NotImplemented,
                format!("tideway does not support the {context} option '{name}'"),
            ));
        }
        if let (Bson::Document(inner), ArgType::Struct(inner_args)) = (value, arg.ty) {
            validate_fields(
                &format!("{context}.{name}"),
                inner_args,
                inner.iter(),
                inner,
            )?;
        }
        if let Bson::Array(entries) = value {
            match arg.ty {
                ArgType::Entries(entry_args) => {
                    let entry_context = format!("{context}.{name}");
                    for (index, entry) in entries.iter().enumerate() {
                        let entry = entry_document(&entry_context, index, entry)?;
                        validate_fields(&entry_context, entry_args, entry.iter(), entry)?;
                    }
                }
                ArgType::Variant(kinds) => {
                    let entry_context = format!("{context}.{name}");
                    for (index, entry) in entries.iter().enumerate() {
                        let entry = entry_document(&entry_context, index, entry)?;
                        // The first field names the kind; mongod's parser reports anything else
                        // as an unknown field of the command itself.
                        let kind = entry.keys().next().map_or("", String::as_str);
                        let Some((_, entry_args)) = kinds.iter().find(|(name, _)| *name == kind)
                        else {
                            return Err(CommandError::new(
                                ErrorCode::Location40415,
                                format!("BSON field '{context}.{kind}' is an unknown field."),
                            ));
                        };
                        validate_fields(&entry_context, entry_args, entry.iter(), entry)?;
                    }
                }
                _ => {}
            }
        }
    }
    for arg in args.fields.iter().filter(|arg| arg.required) {
        if document.get(arg.name).is_none_or(is_absent) {
            return Err(CommandError::new(
                ErrorCode::Location40414,
                format!(
                    "BSON field '{context}.{}' is missing but a required field",
                    arg.name
                ),
            ));
        }
    }
    Ok(())
}

/// Entry `index` of the array `context` as a document, or mongod's 14 naming its position.
fn entry_document<'d>(context: &str, index: usize, entry: &'d Bson) -> CommandResult<&'d Document> {
    match entry {
        Bson::Document(entry) => Ok(entry),
        other => Err(CommandError::type_mismatch(format!(
            "BSON field '{context}.{index}' is the wrong type '{}', expected type 'object'",
            type_name(other)
        ))),
    }
}

/// A value that asks for nothing: null, false or an empty document.
fn is_inert(value: &Bson) -> bool {
    match value {
        Bson::Null | Bson::Undefined | Bson::Boolean(false) => true,
        Bson::Document(document) => document.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of `ty` that asks for something.
    fn meaningful(ty: ArgType) -> Bson {
        match ty {
            ArgType::Any | ArgType::Object => Bson::Document(bson::doc! {"x": 1}),
            ArgType::Number | ArgType::Int => Bson::Int32(1),
            ArgType::Long => Bson::Int64(1),
            ArgType::Double => Bson::Double(1.0),
            ArgType::SafeBool | ArgType::Bool | ArgType::OptionalBool => Bson::Boolean(true),
            ArgType::Str => Bson::String("x".into()),
            ArgType::Array => Bson::Array(vec![Bson::Int32(1)]),
            ArgType::Entries(args) => Bson::Array(vec![Bson::Document(required_fields(args))]),
            ArgType::Struct(args) => Bson::Document(required_fields(args)),
            ArgType::Variant(kinds) => Bson::Array(
                kinds
                    .iter()
                    .map(|(_, args)| Bson::Document(required_fields(args)))
                    .collect(),
            ),
        }
    }

    /// A document with a meaningful value for each required field of `args`.
    fn required_fields(args: &Args) -> Document {
        let mut entry = Document::new();
        for field in args.fields.iter().filter(|field| field.required) {
            entry.insert(field.name, meaningful(field.ty));
        }
        entry
    }

    #[test]
    fn every_refused_option_is_refused_and_every_other_accepted() {
        for spec in crate::commands::all() {
            let Some(args) = args_for(spec.name) else {
                continue;
            };
            for arg in args.fields {
                let mut body = bson::doc! {spec.name: 1};
                for other in args.fields.iter().filter(|other| other.required) {
                    body.insert(other.name, meaningful(other.ty));
                }
                body.insert(arg.name, meaningful(arg.ty));
                let outcome = validate(spec.name, args, &body);
                match arg.use_ {
                    Use::Refused => {
                        let error = outcome.expect_err(arg.name);
                        assert_eq!(
                            error.code,
                            ErrorCode::NotImplemented,
                            "{}.{}",
                            spec.name,
                            arg.name
                        );
                    }
                    Use::Honoured | Use::NoOp => {
                        assert!(outcome.is_ok(), "{}.{}: {outcome:?}", spec.name, arg.name)
                    }
                }
                // null is absent for optional fields.
                if !arg.required && arg.ty != ArgType::OptionalBool {
                    body.insert(arg.name, Bson::Null);
                    assert!(
                        validate(spec.name, args, &body).is_ok(),
                        "{}.{}",
                        spec.name,
                        arg.name
                    );
                }
            }
        }
    }

    #[test]
    fn every_registered_command_is_described() {
        for spec in crate::commands::all() {
            assert!(
                args_for(spec.name).is_some(),
                "{} has no description",
                spec.name
            );
        }
    }
}
