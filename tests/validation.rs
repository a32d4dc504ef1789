//! Argument validation, table-driven, for every registered command. Each row is a command body
//! and what mongod 7.0 answers for it (its IDL: strict commands refuse unknown fields with 40415,
//! wrong types are 14 TypeMismatch with the IDL's type list, missing required fields 40414, `gte`
//! validators 51024), or what tideway answers where it refuses a field mongod knows but tideway
//! does not implement (238). A test checks that every registered command has rows.

mod common;

use bson::{doc, Bson, Document};
use common::TestServer;

/// What a row expects.
enum Expect {
    /// Succeeds.
    Ok,
    /// Fails with this code and exactly this message.
    Error(i32, &'static str),
    /// Fails with this code (the message is the handler's own).
    Code(i32),
}

use Expect::{Code, Error, Ok};

fn rows() -> Vec<(&'static str, Document, Expect)> {
    vec![
        // find
        ("find", doc! {"find": "c", "foo": 1}, Error(40415, "BSON field 'find.foo' is an unknown field.")),
        ("find", doc! {"find": "c", "limit": "x"}, Error(14, "BSON field 'find.limit' is the wrong type 'string', expected types '[long, int, decimal, double']")),
        ("find", doc! {"find": "c", "limit": -1}, Error(51024, "BSON field 'find.limit' value must be >= 0, actual value '-1'")),
        ("find", doc! {"find": "c", "skip": -2}, Error(51024, "BSON field 'find.skip' value must be >= 0, actual value '-2'")),
        ("find", doc! {"find": "c", "batchSize": -1}, Code(51024)),
        ("find", doc! {"find": "c", "singleBatch": 1}, Error(14, "Field 'singleBatch' should be a boolean value, but found: int")),
        ("find", doc! {"find": "c", "sort": 5}, Error(14, "BSON field 'find.sort' is the wrong type 'int', expected type 'object'")),
        ("find", doc! {"find": "c", "min": {"a": 1}}, Code(238)),
        ("find", doc! {"find": "c", "let": {"x": 1}}, Ok),
        ("find", doc! {"find": "c", "let": {"X": 1}}, Error(16870, "Invalid 'let' parameter :: caused by :: 'X' starts with an invalid character for a user variable name")),
        ("find", doc! {"find": "c", "let": {"x": "$a"}}, Code(4890500)),
        ("find", doc! {"find": "c", "let": 1}, Code(14)),
        ("find", doc! {"find": "c", "allowPartialResults": true, "limit": Bson::Null}, Ok),
        // getMore, killCursors
        ("getMore", doc! {"getMore": 5_i64}, Error(40414, "BSON field 'getMore.collection' is missing but a required field")),
        ("getMore", doc! {"getMore": 5_i64, "collection": "c", "batchSize": -1}, Code(51024)),
        ("getMore", doc! {"getMore": 5_i64, "collection": "c", "foo": 1}, Error(40415, "BSON field 'getMore.foo' is an unknown field.")),
        ("killCursors", doc! {"killCursors": "c"}, Error(40414, "BSON field 'killCursors.cursors' is missing but a required field")),
        ("killCursors", doc! {"killCursors": "c", "cursors": 5}, Error(14, "BSON field 'killCursors.cursors' is the wrong type 'int', expected type 'array'")),
        ("killCursors", doc! {"killCursors": "c", "cursors": [], "foo": 1}, Code(40415)),
        ("killCursors", doc! {"killCursors": "c", "cursors": [5]}, Error(14, "BSON field 'killCursors.cursors.0' is the wrong type 'int', expected type 'long'")),
        ("getMore", doc! {"getMore": 5, "collection": "c"}, Error(14, "BSON field 'getMore.getMore' is the wrong type 'int', expected type 'long'")),
        // count, distinct
        ("count", doc! {"count": "c", "skip": -1}, Error(51024, "BSON field 'count.skip' value must be >= 0, actual value '-1'")),
        ("count", doc! {"count": "c", "query": "x"}, Error(14, "BSON field 'count.query' is the wrong type 'string', expected type 'object'")),
        ("count", doc! {"count": "c", "foo": 1}, Error(40415, "BSON field 'count.foo' is an unknown field.")),
        ("count", doc! {"count": "c", "fields": {"a": 1}}, Ok),
        ("distinct", doc! {"distinct": "c"}, Error(40414, "BSON field 'distinct.key' is missing but a required field")),
        ("distinct", doc! {"distinct": "c", "key": 5}, Error(14, "BSON field 'distinct.key' is the wrong type 'int', expected type 'string'")),
        ("distinct", doc! {"distinct": "c", "key": "a", "foo": 1}, Error(40415, "BSON field 'distinct.foo' is an unknown field.")),
        // aggregate
        ("aggregate", doc! {"aggregate": "c", "cursor": {}}, Error(40414, "BSON field 'aggregate.pipeline' is missing but a required field")),
        ("aggregate", doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "allowDiskUse": 1}, Error(14, "Field 'allowDiskUse' should be a boolean value, but found: int")),
        ("aggregate", doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "foo": 1}, Error(40415, "BSON field 'aggregate.foo' is an unknown field.")),
        ("aggregate", doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "let": {"x": 1}}, Ok),
        ("mapReduce", doc! {"mapReduce": "c", "reduce": "function(k, v) { return 1 }", "out": {"inline": 1}}, Error(40414, "BSON field 'MapReduce.map' is missing but a required field")),
        ("mapReduce", doc! {"mapReduce": "c", "map": "function() {}", "reduce": "function(k, v) { return 1 }", "out": {"inline": 1}, "foo": 1}, Error(40415, "BSON field 'MapReduce.foo' is an unknown field.")),
        ("mapReduce", doc! {"mapReduce": "c", "map": "function() {}", "reduce": "function(k, v) { return 1 }", "out": {"inline": 1}, "query": 5}, Error(14, "BSON field 'MapReduce.query' is the wrong type 'int', expected type 'object'")),
        ("mapReduce", doc! {"mapReduce": "c", "map": "function() {}", "reduce": "function(k, v) { return 1 }", "out": {"inline": 1}, "verbose": true, "jsMode": false}, Ok),
        ("aggregate", doc! {"aggregate": "c", "pipeline": [{"$match": {"$expr": "$$y"}}], "cursor": {}, "let": {"x": 1}}, Error(17276, "Use of undefined variable: y")),
        ("aggregate", doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "bypassDocumentValidation": true}, Ok),
        // explain
        ("explain", doc! {"explain": {"find": "c"}, "verbosity": "bogus"}, Code(2)),
        ("explain", doc! {"explain": {"find": "c"}, "foo": 1}, Error(40415, "BSON field 'explain.foo' is an unknown field.")),
        ("explain", doc! {"explain": {"find": "c", "foo": 1}}, Error(40415, "BSON field 'find.foo' is an unknown field.")),
        ("explain", doc! {"explain": {"bogus": "c"}}, Code(59)),
        ("explain", doc! {"explain": {"bulkWrite": 1, "ops": [{"delete": 0, "filter": {}}], "nsInfo": [{"ns": "v.c"}]}}, Error(238, "tideway does not support explain of bulkWrite")),
        ("explain", doc! {"explain": {"count": "c"}, "verbosity": "queryPlanner"}, Ok),
        // writes
        ("insert", doc! {"insert": "c"}, Error(40414, "BSON field 'insert.documents' is missing but a required field")),
        ("insert", doc! {"insert": "c", "documents": [{}], "ordered": 1}, Error(14, "BSON field 'insert.ordered' is the wrong type 'int', expected type 'bool'")),
        ("insert", doc! {"insert": "c", "documents": [{}], "foo": 1}, Error(40415, "BSON field 'insert.foo' is an unknown field.")),
        ("insert", doc! {"insert": "c", "documents": 5}, Error(14, "BSON field 'insert.documents' is the wrong type 'int', expected type 'array'")),
        ("update", doc! {"update": "c"}, Error(40414, "BSON field 'update.updates' is missing but a required field")),
        ("update", doc! {"update": "c", "updates": [], "foo": 1}, Error(40415, "BSON field 'update.foo' is an unknown field.")),
        ("update", doc! {"update": "c", "updates": [{"q": {}, "u": {}}], "let": {"x": 1}}, Ok),
        ("insert", doc! {"insert": "c", "documents": [{}], "let": {"x": 1}}, Error(40415, "BSON field 'insert.let' is an unknown field.")),
        ("update", doc! {"update": "c", "updates": [{"q": {}, "u": {}, "multi": 1}]}, Error(14, "BSON field 'update.updates.multi' is the wrong type 'int', expected type 'bool'")),
        ("update", doc! {"update": "c", "updates": [5]}, Error(14, "BSON field 'update.updates.0' is the wrong type 'int', expected type 'object'")),
        ("update", doc! {"update": "c", "updates": [{"q": {}, "u": {}, "foo": 1}]}, Error(40415, "BSON field 'update.updates.foo' is an unknown field.")),
        ("update", doc! {"update": "c", "updates": [{"u": {}}]}, Error(40414, "BSON field 'update.updates.q' is missing but a required field")),
        ("update", doc! {"update": "c", "updates": [{"q": {}, "u": [{"$set": {"x": "$$x"}}], "c": {"x": 1}}]}, Ok),
        ("update", doc! {"update": "c", "updates": [{"q": {}, "u": {}, "sort": 1}]}, Error(14, "BSON field 'update.updates.sort' is the wrong type 'int', expected type 'object'")),
        ("update", doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "multi": true, "sort": {"a": 1}}]}, Error(9, "Cannot specify sort with multi=true")),
        ("delete", doc! {"delete": "c"}, Error(40414, "BSON field 'delete.deletes' is missing but a required field")),
        ("delete", doc! {"delete": "c", "deletes": [{"q": {}}]}, Error(40414, "BSON field 'delete.deletes.limit' is missing but a required field")),
        ("delete", doc! {"delete": "c", "deletes": [{"q": {}, "limit": 1, "foo": 1}]}, Error(40415, "BSON field 'delete.deletes.foo' is an unknown field.")),
        ("delete", doc! {"delete": "c", "deletes": [], "ordered": "yes"}, Error(14, "BSON field 'delete.ordered' is the wrong type 'string', expected type 'bool'")),
        // bulkWrite (admin only)
        ("bulkWrite", doc! {"bulkWrite": 1, "nsInfo": [{"ns": "v.c"}]}, Error(40414, "BSON field 'bulkWrite.ops' is missing but a required field")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "foo": 1}, Error(40415, "BSON field 'bulkWrite.foo' is an unknown field.")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "ordered": 1}, Error(14, "BSON field 'bulkWrite.ordered' is the wrong type 'int', expected type 'bool'")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "errorsOnly": "x"}, Error(14, "BSON field 'bulkWrite.errorsOnly' is the wrong type 'string', expected type 'bool'")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "let": {"x": 1}}, Ok),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "let": {"X": 1}}, Code(16870)),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "stmtIds": [0]}, Ok),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "stmtIds": [0, 1]}, Code(16)),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "stmtIds": "x"}, Error(14, "BSON field 'bulkWrite.stmtIds' is the wrong type 'string', expected type 'array'")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"update": 0, "filter": {}, "updateMods": {}, "upsert": "x"}], "nsInfo": [{"ns": "v.c"}]}, Error(14, "BSON field 'bulkWrite.ops.upsert' is the wrong type 'string', expected type 'bool'")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c", "isTimeseriesNamespace": true}]}, Error(7934201, "'isTimeseriesNamespace' parameter can only be set when the request is sent on 'system.buckets' namespace to each shard")),
        ("bulkWrite", doc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "v.c"}], "bypassDocumentValidation": true, "cursor": {"batchSize": 5}, "comment": "x"}, Ok),
        ("findAndModify", doc! {"findAndModify": "c", "remove": "x"}, Error(14, "BSON field 'findAndModify.remove' is the wrong type 'string', expected types '[bool, long, int, decimal, double']")),
        ("findAndModify", doc! {"findAndModify": "c", "remove": true, "foo": 1}, Error(40415, "BSON field 'findAndModify.foo' is an unknown field.")),
        ("findAndModify", doc! {"findAndModify": "c", "update": {"$set": {"a.$[x]": 1}}, "arrayFilters": [{"x": 1}]}, Error(2, "The path 'a' must exist in the document in order to apply array updates.")),
        // DDL
        ("create", doc! {"create": "new1", "foo": 1}, Error(40415, "BSON field 'create.foo' is an unknown field.")),
        ("create", doc! {"create": "new1", "capped": "x"}, Error(14, "BSON field 'create.capped' is the wrong type 'string', expected types '[bool, long, int, decimal, double']")),
        ("drop", doc! {"drop": "c", "foo": 1}, Error(40415, "BSON field 'drop.foo' is an unknown field.")),
        ("dropDatabase", doc! {"dropDatabase": 1, "foo": 1}, Error(40415, "BSON field 'dropDatabase.foo' is an unknown field.")),
        ("dropDatabase", doc! {"dropDatabase": 0}, Error(5255100, "Have to pass 1 as 'drop' parameter")),
        ("dropDatabase", doc! {"dropDatabase": "x"}, Error(14, "BSON field 'dropDatabase.dropDatabase' is the wrong type 'string', expected types '[long, int, decimal, double']")),
        ("listDatabases", doc! {"listDatabases": 1, "nameOnly": "x"}, Code(14)),
        ("listDatabases", doc! {"listDatabases": 1, "foo": 1}, Error(40415, "BSON field 'listDatabases.foo' is an unknown field.")),
        ("listCollections", doc! {"listCollections": 1, "nameOnly": 1}, Error(14, "BSON field 'listCollections.nameOnly' is the wrong type 'int', expected type 'bool'")),
        ("listCollections", doc! {"listCollections": 1, "filter": 5}, Error(14, "BSON field 'listCollections.filter' is the wrong type 'int', expected type 'object'")),
        ("listCollections", doc! {"listCollections": 1, "foo": 1}, Code(40415)),
        ("listIndexes", doc! {"listIndexes": "c", "foo": 1}, Error(40415, "BSON field 'listIndexes.foo' is an unknown field.")),
        ("createIndexes", doc! {"createIndexes": "c"}, Error(40414, "BSON field 'createIndexes.indexes' is missing but a required field")),
        ("createIndexes", doc! {"createIndexes": "c", "indexes": [], "foo": 1}, Code(40415)),
        ("createIndexes", doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a\0b"}]}, Code(67)),
        ("dropIndexes", doc! {"dropIndexes": "c"}, Error(40414, "BSON field 'dropIndexes.index' is missing but a required field")),
        ("dropIndexes", doc! {"dropIndexes": "c", "index": "*", "foo": 1}, Code(40415)),
        ("collMod", doc! {"collMod": "c", "foo": 1}, Error(40415, "BSON field 'collMod.foo' is an unknown field.")),
        ("collMod", doc! {"collMod": "c", "viewOn": "d"}, Code(72)),
        ("collMod", doc! {"collMod": "c", "validationLevel": 5}, Error(14, "BSON field 'collMod.validationLevel' is the wrong type 'int', expected type 'string'")),
        ("collMod", doc! {"collMod": "c", "validationAction": "bogus"}, Error(2, "Enumeration value 'bogus' for field 'collMod.validationAction' is not a valid value.")),
        ("renameCollection", doc! {"renameCollection": "v.c"}, Error(40414, "BSON field 'renameCollection.to' is missing but a required field")),
        ("renameCollection", doc! {"renameCollection": "v.c", "to": "v.d", "foo": 1}, Code(40415)),
        ("renameCollection", doc! {"renameCollection": "v.c", "to": 5}, Code(14)),
        // collection_to_capped.cpp: BasicCommands without an IDL (unknown fields are ignored).
        ("convertToCapped", doc! {"convertToCapped": "c"}, Error(72, "Capped collection size must be greater than zero")),
        ("convertToCapped", doc! {"convertToCapped": "nosuch", "size": 4096, "foo": 1}, Code(26)),
        ("cloneCollectionAsCapped", doc! {"cloneCollectionAsCapped": "c", "size": 4096}, Error(14, "'toCollection' must be of type String")),
        // replication commands on a standalone (repl_set_commands.cpp): 76 NoReplicationEnabled
        ("replSetInitiate", doc! {"replSetInitiate": {}}, Error(76, "This node was not started with replication enabled.")),
        ("replSetGetStatus", doc! {"replSetGetStatus": 1, "foo": 1}, Error(76, "not running with --replSet")),
        ("replSetGetConfig", doc! {"replSetGetConfig": 1}, Error(76, "not running with --replSet")),
        ("replSetStepDown", doc! {"replSetStepDown": 60}, Error(76, "not running with --replSet")),
        ("commitTransaction", doc! {"commitTransaction": 1, "foo": 1}, Error(40415, "BSON field 'commitTransaction.foo' is an unknown field.")),
        ("commitTransaction", doc! {"commitTransaction": 1}, Error(125, "commitTransaction must be run within a transaction")),
        ("abortTransaction", doc! {"abortTransaction": 1, "recoveryToken": 1}, Error(14, "BSON field 'abortTransaction.recoveryToken' is the wrong type 'int', expected type 'object'")),
        ("cloneCollectionAsCapped", doc! {"cloneCollectionAsCapped": "c", "toCollection": "d", "size": -1}, Code(72)),
        // statistics and diagnostics
        ("dbStats", doc! {"dbStats": 1, "scale": 0}, Error(51024, "BSON field 'dbStats.scale' value must be >= 1, actual value '0'")),
        ("dbStats", doc! {"dbStats": 1, "foo": 1}, Error(40415, "BSON field 'dbStats.foo' is an unknown field.")),
        ("collStats", doc! {"collStats": "c", "scale": 0}, Code(51024)),
        ("ping", doc! {"ping": 1, "foo": 1}, Error(40415, "BSON field 'ping.foo' is an unknown field.")),
        ("hostInfo", doc! {"hostInfo": 1, "foo": 1}, Code(40415)),
        ("getCmdLineOpts", doc! {"getCmdLineOpts": 1, "foo": 1}, Code(40415)),
        ("getLog", doc! {"getLog": "global", "foo": 1}, Code(40415)),
        ("connectionStatus", doc! {"connectionStatus": 1, "foo": 1}, Code(40415)),
        ("connectionStatus", doc! {"connectionStatus": 1, "showPrivileges": "x"}, Code(14)),
        // authentication and users (sasl_commands.idl, user_management_commands.idl)
        ("saslStart", doc! {"saslStart": 1, "payload": ""}, Error(40414, "BSON field 'saslStart.mechanism' is missing but a required field")),
        ("saslStart", doc! {"saslStart": 1, "mechanism": "PLAIN", "payload": ""}, Error(334, "Received authentication for mechanism PLAIN which is not enabled")),
        ("saslContinue", doc! {"saslContinue": 1, "conversationId": 1}, Code(40414)),
        ("saslContinue", doc! {"saslContinue": 1, "conversationId": 7, "payload": ""}, Error(17, "sasl: Mismatched conversation id")),
        ("logout", doc! {"logout": 1, "foo": 1}, Code(40415)),
        // authenticate (authentication_commands.idl, strict) and rotateCertificates
        // (rotate_certificates.idl)
        ("authenticate", doc! {"authenticate": 1}, Error(40414, "BSON field 'authenticate.mechanism' is missing but a required field")),
        ("authenticate", doc! {"authenticate": 1, "mechanism": "MONGODB-X509", "user": 1}, Error(14, "BSON field 'authenticate.user' is the wrong type 'int', expected type 'string'")),
        ("authenticate", doc! {"authenticate": 1, "mechanism": "MONGODB-X509", "username": "u"}, Error(40415, "BSON field 'authenticate.username' is an unknown field.")),
        ("authenticate", doc! {"authenticate": 1, "mechanism": "MONGODB-X509"}, Error(18, "Authentication failed.")),
        ("rotateCertificates", doc! {"rotateCertificates": 1, "message": 5}, Error(14, "BSON field 'rotateCertificates.message' is the wrong type 'int', expected type 'string'")),
        ("rotateCertificates", doc! {"rotateCertificates": 1, "foo": 1}, Error(40415, "BSON field 'rotateCertificates.foo' is an unknown field.")),
        ("rotateCertificates", doc! {"rotateCertificates": 1, "message": "rotated"}, Ok),
        ("createUser", doc! {"createUser": "u", "pwd": "p", "roles": [], "foo": 1}, Error(40415, "BSON field 'createUser.foo' is an unknown field.")),
        ("createUser", doc! {"createUser": "u", "pwd": "p"}, Error(40414, "BSON field 'createUser.roles' is missing but a required field")),
        ("createUser", doc! {"createUser": "u", "pwd": 1, "roles": []}, Code(14)),
        ("createUser", doc! {"createUser": "u", "pwd": "p", "roles": [], "authenticationRestrictions": [{"clientSource": ["127.0.0.1"]}]}, Code(238)),
        ("updateUser", doc! {"updateUser": "u", "foo": 1}, Code(40415)),
        ("updateUser", doc! {"updateUser": "u"}, Error(2, "Must specify at least one field to update in updateUser")),
        ("dropUser", doc! {"dropUser": "nobody"}, Error(11, "User 'nobody@v' not found")),
        ("dropAllUsersFromDatabase", doc! {"dropAllUsersFromDatabase": 1, "foo": 1}, Code(40415)),
        ("usersInfo", doc! {"usersInfo": 1, "foo": 1}, Code(40415)),
        ("usersInfo", doc! {"usersInfo": 1, "showPrivileges": true}, Error(20, "Privilege or restriction details require exact-match usersInfo queries")),
        ("usersInfo", doc! {"usersInfo": 1, "filter": {"user": "u"}}, Code(238)),
        ("grantRolesToUser", doc! {"grantRolesToUser": "u"}, Code(40414)),
        ("grantRolesToUser", doc! {"grantRolesToUser": "u", "roles": []}, Error(2, "grantRolesToUser command requires a non-empty \"roles\" array")),
        ("revokeRolesFromUser", doc! {"revokeRolesFromUser": "u", "roles": []}, Error(2, "revokeRolesFromUser command requires a non-empty \"roles\" array")),
        // Role commands (user_management_commands.idl, strict).
        ("createRole", doc! {"createRole": "r", "privileges": [], "roles": [], "foo": 1}, Error(40415, "BSON field 'createRole.foo' is an unknown field.")),
        ("createRole", doc! {"createRole": "r", "roles": []}, Error(40414, "BSON field 'createRole.privileges' is missing but a required field")),
        ("createRole", doc! {"createRole": "r", "privileges": []}, Error(40414, "BSON field 'createRole.roles' is missing but a required field")),
        ("createRole", doc! {"createRole": "r", "privileges": {}, "roles": []}, Code(14)),
        ("createRole", doc! {"createRole": "r", "privileges": [], "roles": [], "authenticationRestrictions": [{"clientSource": ["127.0.0.1"]}]}, Code(238)),
        ("updateRole", doc! {"updateRole": "r", "foo": 1}, Code(40415)),
        ("updateRole", doc! {"updateRole": "r"}, Error(2, "Must specify at least one field to update in updateRole")),
        ("dropRole", doc! {"dropRole": "nothing"}, Error(31, "Could not find role: nothing@v")),
        ("dropAllRolesFromDatabase", doc! {"dropAllRolesFromDatabase": 1, "foo": 1}, Code(40415)),
        ("grantPrivilegesToRole", doc! {"grantPrivilegesToRole": "r"}, Code(40414)),
        ("grantPrivilegesToRole", doc! {"grantPrivilegesToRole": "r", "privileges": []}, Error(2, "grantPrivilegesToRole command requires a non-empty \"privileges\" array")),
        ("revokePrivilegesFromRole", doc! {"revokePrivilegesFromRole": "r", "privileges": []}, Error(2, "revokePrivilegesFromRole command requires a non-empty \"privileges\" array")),
        ("grantRolesToRole", doc! {"grantRolesToRole": "r"}, Code(40414)),
        ("grantRolesToRole", doc! {"grantRolesToRole": "r", "roles": []}, Error(2, "grantRolesToRole command requires a non-empty \"roles\" array")),
        ("revokeRolesFromRole", doc! {"revokeRolesFromRole": "r", "roles": []}, Error(2, "revokeRolesFromRole command requires a non-empty \"roles\" array")),
        ("rolesInfo", doc! {"rolesInfo": 1, "foo": 1}, Code(40415)),
        ("rolesInfo", doc! {"rolesInfo": 1, "showBuiltinRoles": "x"}, Code(14)),
        ("rolesInfo", doc! {"rolesInfo": 1}, Ok),
        // hello is not strict: unknown fields pass, known ones are typed.
        ("hello", doc! {"hello": 1, "foo": 1}, Ok),
        ("hello", doc! {"hello": 1, "helloOk": "x"}, Error(14, "BSON field 'hello.helloOk' is the wrong type 'string', expected types '[bool, long, int, decimal, double']")),
        ("hello", doc! {"hello": 1, "maxAwaitTimeMS": -1}, Code(51024)),
        ("isMaster", doc! {"isMaster": 1, "foo": 1}, Ok),
        ("buildInfo", doc! {"buildInfo": 1, "foo": 1}, Ok),
        ("listCommands", doc! {"listCommands": 1, "foo": 1}, Ok),
        ("whatsmyuri", doc! {"whatsmyuri": 1, "foo": 1}, Ok),
        ("serverStatus", doc! {"serverStatus": 1, "foo": 0}, Ok),
        ("getParameter", doc! {"getParameter": 1, "nope": 1}, Code(72)),
        ("setParameter", doc! {"setParameter": 1, "nope": 1}, Code(72)),
        // sessions
        ("startSession", doc! {"startSession": 1, "foo": 1}, Ok),
        ("endSessions", doc! {"endSessions": [], "foo": 1}, Error(40415, "BSON field 'endSessions.foo' is an unknown field.")),
        ("refreshSessions", doc! {"refreshSessions": [], "foo": 1}, Code(40415)),
        ("killSessions", doc! {"killSessions": [], "foo": 1}, Ok),
        ("killSessions", doc! {"killSessions": 5}, Error(14, "BSON field 'KillSessionsCmd.killSessions' is the wrong type 'int', expected type 'array'")),
        ("killAllSessions", doc! {"killAllSessions": [], "foo": 1}, Ok),
        ("killAllSessions", doc! {"killAllSessions": 5}, Error(14, "BSON field 'KillAllSessionsCmd.killAllSessions' is the wrong type 'int', expected type 'array'")),
        ("endSessions", doc! {"endSessions": 5}, Error(14, "BSON field 'endSessions.endSessions' is the wrong type 'int', expected type 'array'")),
        // Each entry is mongod's LogicalSessionFromClient: `id` required, a UUID.
        ("endSessions", doc! {"endSessions": [{}]}, Code(40414)),
        ("refreshSessions", doc! {"refreshSessions": [{"id": "x"}]}, Code(14)),
        ("killSessions", doc! {"killSessions": [{"id": 1}]}, Code(14)),
        // mongod's BasicCommand: other fields are ignored.
        ("refreshLogicalSessionCacheNow", doc! {"refreshLogicalSessionCacheNow": 1, "foo": 1}, Ok),
        // query diagnostics: currentOp's other fields are its filter; killOp, profile and sleep
        // are not strict in mongod either.
        ("currentOp", doc! {"currentOp": 1, "foo": 1}, Ok),
        ("killOp", doc! {"killOp": 1, "op": 1, "foo": 1}, Ok),
        ("killOp", doc! {"killOp": 1}, Error(4, "Missing expected field \"op\"")),
        ("profile", doc! {"profile": -1, "foo": 1}, Ok),
        ("profile", doc! {"profile": -1, "sampleRate": 1}, Error(14, "BSON field 'profile.sampleRate' is the wrong type 'int', expected type 'double'")),
        ("profile", doc! {"profile": -1, "slowms": "x"}, Code(14)),
        ("profile", doc! {"profile": "x"}, Code(14)),
        // test-only commands
        ("sleep", doc! {"sleep": 1, "millis": 1, "foo": 1}, Ok),
        ("sleep", doc! {"sleep": 1, "secs": 1, "seconds": 1}, Error(51153, "Only one of 'secs' and 'seconds' may be specified")),
        ("sleep", doc! {"sleep": 1, "millis": "x"}, Error(34345, "'millis' must be a number.")),
        ("advanceClock", doc! {"advanceClock": 0, "foo": 1}, Ok),
        ("runTtlPass", doc! {"runTtlPass": 1, "foo": 1}, Ok),
    ]
}

/// Admin-only commands run against `admin`; the rest against `v`.
fn database(command: &str) -> &'static str {
    match command {
        "renameCollection" | "hostInfo" | "getCmdLineOpts" | "getLog" | "getParameter"
        | "setParameter" | "listDatabases" | "advanceClock" | "runTtlPass" | "currentOp"
        | "killOp" | "sleep" | "bulkWrite" | "replSetInitiate" | "replSetGetStatus"
        | "replSetGetConfig" | "replSetStepDown" | "commitTransaction" | "abortTransaction"
        | "rotateCertificates" => "admin",
        _ => "v",
    }
}

#[tokio::test]
async fn every_command_validates_its_arguments_as_mongod() {
    let server = TestServer::start_with(tideway::Config {
        enable_test_commands: true,
        ..common::test_config()
    })
    .await;
    let client = server.client();
    client
        .database("v")
        .run_command(doc! {"insert": "c", "documents": [{"_id": 1}]})
        .await
        .unwrap();
    let mut failures = Vec::new();
    for (command, body, expect) in rows() {
        let result = client
            .database(database(command))
            .run_command(body.clone())
            .await;
        let outcome = match &result {
            Result::Ok(_) => None,
            Err(error) => match *error.kind {
                mongodb::error::ErrorKind::Command(ref failure) => {
                    Some((failure.code, failure.message.clone()))
                }
                ref other => Some((-1, format!("{other:?}"))),
            },
        };
        let as_expected = match (&expect, &outcome) {
            (Ok, None) => true,
            (Error(code, message), Some((got, text))) => code == got && message == text,
            (Code(code), Some((got, _))) => code == got,
            _ => false,
        };
        if !as_expected {
            failures.push(format!("{command}: {body} → {outcome:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    server.stop().await;
}

#[test]
fn every_registered_command_has_validation_rows() {
    let covered: Vec<&str> = rows().iter().map(|(command, _, _)| *command).collect();
    for spec in tideway::commands::all() {
        assert!(
            covered.contains(&spec.name),
            "no validation rows for {}",
            spec.name
        );
    }
}
