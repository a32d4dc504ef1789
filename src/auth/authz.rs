//! What each command requires under `--auth` (mongod's `requiresAuth` and each command's
//! privilege check, as data: [`rule`] and the needs it derives from the command body), the
//! authorization state shared across connections ([`ServerAuth`]: whether `--auth` is on, the
//! generation that invalidates every connection's resolved privileges when a user or role
//! changes, whether a user has been seen), and the per-connection [`PrivilegeCache`].
//! `crate::access::enforce` applies them before every command.
//!
//! Invariants: every registered command has a rule (a unit test walks the registry); the
//! needs of a command are derived from its body alone, within [`MAX_PIPELINE_DEPTH`] nested
//! pipelines.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use bson::{Bson, Document};

use super::name_and_db;
use super::privileges::{Action, PrivilegeSet, Target};

use Action as A;

/// Server-wide authorization state.
#[derive(Debug)]
pub struct ServerAuth {
    /// `--auth`.
    pub enabled: bool,
    /// Bumped by every change to users or roles: cached privileges older than it are stale.
    generation: AtomicU64,
    /// Whether any user exists: 0 not known yet, 1 none, 2 some (then for good).
    pub(crate) users_exist: AtomicU8,
}

impl ServerAuth {
    pub fn new(enabled: bool) -> ServerAuth {
        ServerAuth {
            enabled,
            generation: AtomicU64::new(0),
            users_exist: AtomicU8::new(0),
        }
    }

    /// Users or roles changed: every connection re-resolves its privileges.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// A user was created.
    pub(crate) fn user_created(&self) {
        self.users_exist.store(2, Ordering::Release);
        self.changed();
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// A connection's resolved privileges, valid while the server's generation is unchanged.
#[derive(Debug, Default)]
pub struct PrivilegeCache {
    entry: std::sync::Mutex<Option<(u64, Arc<PrivilegeSet>)>>,
}

impl PrivilegeCache {
    /// The privileges resolved at `generation`, if those are the ones kept.
    pub(crate) fn at(&self, generation: u64) -> Option<Arc<PrivilegeSet>> {
        match &*self.lock() {
            Some((kept, set)) if *kept == generation => Some(Arc::clone(set)),
            _ => None,
        }
    }

    /// Keeps `set`, resolved at `generation`.
    pub(crate) fn keep(&self, generation: u64, set: Arc<PrivilegeSet>) {
        *self.lock() = Some((generation, set));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, Arc<PrivilegeSet>)>> {
        self.entry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn clear(&self) {
        *self.lock() = None;
    }
}

/// What a command requires of its caller.
#[derive(Clone, Copy)]
pub enum Rule {
    /// Answered to anyone, before authentication (mongod's `requiresAuth() == false`).
    PreAuth,
    /// Any authenticated user: the command acts only on what is the caller's own (its sessions,
    /// cursors, transactions) or shows only what the caller may see.
    AnyUser,
    /// Actions on the collection the command names (`{<command>: "<collection>"}`).
    Collection(&'static [Action]),
    /// Actions on the command's database.
    Database(&'static [Action]),
    /// Actions on the cluster.
    Cluster(&'static [Action]),
    /// Computed from the command body.
    Computed(for<'a> fn(&'a str, &'a Document, &mut Needs<'a>)),
}

/// The rule of every command tideway registers (and of those it may register later under
/// mongod's names). `None` for an unknown name.
pub fn rule(name: &str) -> Option<Rule> {
    let rule = match name {
        "hello" | "isMaster" | "ismaster" | "ping" | "buildInfo" | "buildinfo" | "listCommands"
        | "connectionStatus" | "saslStart" | "saslContinue" | "authenticate" | "logout" => {
            Rule::PreAuth
        }
        "whatsmyuri"
        | "getMore"
        | "killCursors"
        | "startSession"
        | "endSessions"
        | "refreshSessions"
        | "refreshLogicalSessionCacheNow"
        | "commitTransaction"
        | "abortTransaction"
        | "sleep"
        | "listDatabases"
        | "killOp" => Rule::AnyUser,
        "find" | "count" | "distinct" => Rule::Collection(&[A::find]),
        "listIndexes" => Rule::Collection(&[A::listIndexes]),
        "collStats" | "collstats" => Rule::Collection(&[A::collStats]),
        "createIndexes" => Rule::Collection(&[A::createIndex]),
        "dropIndexes" | "deleteIndexes" => Rule::Collection(&[A::dropIndex]),
        "drop" => Rule::Collection(&[A::dropCollection]),
        "convertToCapped" => Rule::Collection(&[A::convertToCapped]),
        "validate" => Rule::Collection(&[A::validate]),
        "dbStats" | "dbstats" => Rule::Database(&[A::dbStats]),
        "dropDatabase" => Rule::Database(&[A::dropDatabase]),
        "profile" => Rule::Database(&[A::enableProfiler]),
        "dropUser" | "dropAllUsersFromDatabase" => Rule::Database(&[A::dropUser]),
        "dropRole" | "dropAllRolesFromDatabase" => Rule::Database(&[A::dropRole]),
        "serverStatus" => Rule::Cluster(&[A::serverStatus]),
        "hostInfo" => Rule::Cluster(&[A::hostInfo]),
        "getCmdLineOpts" => Rule::Cluster(&[A::getCmdLineOpts]),
        "getLog" => Rule::Cluster(&[A::getLog]),
        "getParameter" => Rule::Cluster(&[A::getParameter]),
        "setParameter" => Rule::Cluster(&[A::setParameter]),
        "replSetGetStatus" => Rule::Cluster(&[A::replSetGetStatus]),
        "replSetGetConfig" => Rule::Cluster(&[A::replSetGetConfig]),
        "replSetInitiate" => Rule::Cluster(&[A::replSetConfigure]),
        "replSetStepDown" => Rule::Cluster(&[A::replSetStateChange]),
        "killAllSessions" => Rule::Cluster(&[A::killAnySession]),
        "rotateCertificates" => Rule::Cluster(&[A::rotateCertificates]),
        // tideway's test commands move the server's clock and run the reaper: host management.
        "advanceClock" | "runTtlPass" => Rule::Cluster(&[A::setParameter]),
        "insert" | "update" | "delete" | "findAndModify" | "findandmodify" => {
            Rule::Computed(needs_of_write)
        }
        "aggregate" => Rule::Computed(needs_of_aggregate),
        "explain" => Rule::Computed(needs_of_explain),
        "mapReduce" | "mapreduce" => Rule::Computed(needs_of_map_reduce),
        "create" => Rule::Computed(needs_of_create),
        "collMod" => Rule::Computed(needs_of_coll_mod),
        "renameCollection" => Rule::Computed(needs_of_rename),
        "cloneCollectionAsCapped" => Rule::Computed(needs_of_clone_as_capped),
        "bulkWrite" => Rule::Computed(needs_of_bulk_write),
        "listCollections" => Rule::Computed(needs_of_list_collections),
        "currentOp" => Rule::Computed(needs_of_current_op),
        "killSessions" => Rule::Computed(needs_of_kill_sessions),
        "createUser"
        | "createRole"
        | "updateUser"
        | "updateRole"
        | "grantPrivilegesToRole"
        | "revokePrivilegesFromRole"
        | "grantRolesToUser"
        | "grantRolesToRole"
        | "revokeRolesFromUser"
        | "revokeRolesFromRole" => Rule::Computed(needs_of_user_admin),
        "usersInfo" => Rule::Computed(needs_of_users_info),
        "rolesInfo" => Rule::Computed(needs_of_roles_info),
        _ => return None,
    };
    Some(rule)
}

/// Whether `name` needs an authenticated caller (`listCommands`' `requiresAuth`).
pub(crate) fn requires_auth(name: &str) -> bool {
    !matches!(rule(name), Some(Rule::PreAuth))
}

/// What a command needs: each entry one resource and the actions of which any one will do.
/// The targets borrow the command body (no allocation per command beyond the list).
#[derive(Debug, Default)]
pub struct Needs<'a> {
    entries: Vec<(Target<'a>, &'static [Action])>,
}

impl<'a> Needs<'a> {
    /// Whether the command needs no privilege at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn cluster(&mut self, actions: &'static [Action]) {
        self.entries.push((Target::Cluster, actions));
    }

    fn database(&mut self, db: &'a str, actions: &'static [Action]) {
        self.entries.push((Target::Database(db), actions));
    }

    fn namespace(&mut self, db: &'a str, coll: &'a str, actions: &'static [Action]) {
        self.entries.push((Target::Namespace(db, coll), actions));
    }

    /// `actions` on the collection named by `value` in `db`; on the database when `value` is
    /// not a collection name (the command then fails on its own terms, if authorized).
    fn collection(&mut self, db: &'a str, value: Option<&'a Bson>, actions: &'static [Action]) {
        match value {
            Some(Bson::String(coll)) if !coll.is_empty() => self.namespace(db, coll, actions),
            _ => self.database(db, actions),
        }
    }

    /// `actions` on a `"<db>.<coll>"` namespace string.
    fn full_namespace(&mut self, value: Option<&'a Bson>, actions: &'static [Action]) {
        match value
            .and_then(Bson::as_str)
            .and_then(|ns| ns.split_once('.'))
        {
            Some((db, coll)) => self.namespace(db, coll, actions),
            None => self.cluster(actions),
        }
    }

    pub(crate) fn allowed_by(&self, privileges: &PrivilegeSet) -> bool {
        self.entries.iter().all(|(target, actions)| {
            actions
                .iter()
                .any(|&action| privileges.allows(*target, action))
        })
    }
}

fn flag(body: &Document, field: &str) -> bool {
    body.get(field)
        .is_some_and(tideway_base::bsonutil::is_truthy)
}

fn needs_of_write<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let name = body.keys().next().map(String::as_str).unwrap_or_default();
    let target = body.get(name);
    let upsert = |statement: &Document| flag(statement, "upsert");
    match name {
        "insert" => needs.collection(db, target, &[A::insert]),
        "delete" => needs.collection(db, target, &[A::remove]),
        "update" => {
            needs.collection(db, target, &[A::update]);
            let statements = body.get_array("updates").map(Vec::as_slice).unwrap_or(&[]);
            if statements.iter().filter_map(Bson::as_document).any(upsert) {
                needs.collection(db, target, &[A::insert]);
            }
        }
        _ => {
            needs.collection(db, target, &[A::find]);
            if flag(body, "remove") {
                needs.collection(db, target, &[A::remove]);
            } else {
                needs.collection(db, target, &[A::update]);
                if upsert(body) {
                    needs.collection(db, target, &[A::insert]);
                }
            }
        }
    }
    if flag(body, "bypassDocumentValidation") {
        needs.collection(db, target, &[A::bypassDocumentValidation]);
    }
}

/// Pipelines nest (`$lookup`, `$unionWith`, `$facet`); deeper than this is refused here, far
/// beyond what the pipeline parser itself accepts.
const MAX_PIPELINE_DEPTH: usize = 64;

fn needs_of_aggregate<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let pipeline = body.get_array("pipeline").map(Vec::as_slice).unwrap_or(&[]);
    let target = body.get("aggregate");
    let first = pipeline
        .first()
        .and_then(Bson::as_document)
        .and_then(|stage| stage.keys().next())
        .map(String::as_str);
    let collection_level = matches!(target, Some(Bson::String(_)));
    // Stages that read something other than the collection's documents replace `find`.
    if collection_level
        && !matches!(
            first,
            Some("$changeStream" | "$collStats" | "$indexStats" | "$listSearchIndexes")
        )
    {
        needs.collection(db, target, &[A::find]);
    }
    pipeline_needs(db, target, pipeline, needs, 0);
    if flag(body, "bypassDocumentValidation") {
        needs.collection(db, target, &[A::bypassDocumentValidation]);
    }
}

fn pipeline_needs<'a>(
    db: &'a str,
    target: Option<&'a Bson>,
    pipeline: &'a [Bson],
    needs: &mut Needs<'a>,
    depth: usize,
) {
    if depth > MAX_PIPELINE_DEPTH {
        // Needs what no role grants: refused as unauthorized rather than walked further.
        needs.cluster(&[A::internal]);
        return;
    }
    for stage in pipeline.iter().filter_map(Bson::as_document) {
        let Some((name, spec)) = stage.iter().next() else {
            continue;
        };
        match name.as_str() {
            "$out" => output_needs(db, spec, needs, &[A::insert, A::remove]),
            "$merge" => {
                let into = spec
                    .as_document()
                    .and_then(|spec| spec.get("into"))
                    .unwrap_or(spec);
                output_needs(db, into, needs, &[A::insert, A::update]);
            }
            "$lookup" | "$graphLookup" | "$unionWith" => {
                let from = match spec {
                    Bson::String(_) => Some(spec),
                    Bson::Document(spec) => spec.get("from").or_else(|| spec.get("coll")),
                    _ => None,
                };
                match from {
                    Some(Bson::Document(from)) => {
                        if let (Ok(from_db), Ok(coll)) = (from.get_str("db"), from.get_str("coll"))
                        {
                            needs.namespace(from_db, coll, &[A::find]);
                        }
                    }
                    Some(from @ Bson::String(_)) => needs.collection(db, Some(from), &[A::find]),
                    _ => {}
                }
                if let Some(inner) = spec
                    .as_document()
                    .and_then(|spec| spec.get_array("pipeline").ok())
                {
                    pipeline_needs(db, target, inner, needs, depth + 1);
                }
            }
            "$facet" => {
                for inner in spec.as_document().into_iter().flat_map(Document::values) {
                    if let Bson::Array(inner) = inner {
                        pipeline_needs(db, target, inner, needs, depth + 1);
                    }
                }
            }
            "$changeStream" => {
                let whole_cluster = spec
                    .as_document()
                    .is_some_and(|spec| flag(spec, "allChangesForCluster"));
                for action in [&[A::changeStream][..], &[A::find]] {
                    if whole_cluster {
                        // Every normal database (mongod: any normal resource).
                        needs.entries.push((Target::Database(""), action));
                    } else {
                        needs.collection(db, target, action);
                    }
                }
            }
            "$collStats" => needs.collection(db, target, &[A::collStats]),
            "$indexStats" => needs.collection(db, target, &[A::indexStats]),
            "$listSearchIndexes" => needs.collection(db, target, &[A::listSearchIndexes]),
            "$currentOp"
                if spec
                    .as_document()
                    .is_some_and(|spec| flag(spec, "allUsers")) =>
            {
                needs.cluster(&[A::inprog]);
            }
            "$listSessions" | "$listLocalSessions" => {
                let all_users = spec
                    .as_document()
                    .is_some_and(|spec| flag(spec, "allUsers") || spec.contains_key("users"));
                if all_users {
                    needs.cluster(&[A::listSessions]);
                }
            }
            _ => {}
        }
    }
}

/// `$out`/`$merge` target: a collection name on the command's database or `{db, coll}`.
fn output_needs<'a>(
    db: &'a str,
    spec: &'a Bson,
    needs: &mut Needs<'a>,
    actions: &'static [Action],
) {
    for &action in actions {
        let one: &'static [Action] = match action {
            A::insert => &[A::insert],
            A::remove => &[A::remove],
            _ => &[A::update],
        };
        match spec {
            Bson::Document(target) => match (target.get_str("db"), target.get_str("coll")) {
                (Ok(out_db), Ok(coll)) => needs.namespace(out_db, coll, one),
                (Err(_), Ok(coll)) => needs.namespace(db, coll, one),
                _ => needs.database(db, one),
            },
            other => needs.collection(db, Some(other), one),
        }
    }
}

fn needs_of_explain<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let Ok(inner) = body.get_document("explain") else {
        return needs.database(db, &[A::find]);
    };
    let inner_name = inner.keys().next().map(String::as_str).unwrap_or_default();
    match rule(inner_name) {
        Some(rule) => rule_needs(rule, db, inner, needs),
        None => needs.database(db, &[A::find]),
    }
}

fn needs_of_map_reduce<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let source = body.get("mapReduce").or_else(|| body.get("mapreduce"));
    needs.collection(db, source, &[A::find]);
    match body.get("out") {
        Some(Bson::Document(out)) if out.contains_key("inline") => {}
        Some(Bson::Document(out)) => {
            let out_db = out.get_str("db").unwrap_or(db);
            let coll = ["replace", "merge", "reduce"]
                .iter()
                .find_map(|mode| out.get(*mode));
            for action in [&[A::insert][..], &[A::remove], &[A::update]] {
                needs.collection(out_db, coll, action);
            }
        }
        Some(out @ Bson::String(_)) => {
            for action in [&[A::insert][..], &[A::remove], &[A::update]] {
                needs.collection(db, Some(out), action);
            }
        }
        _ => {}
    }
}

fn needs_of_create<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    // mongod: creating a collection needs createCollection, or insert on it.
    needs.collection(db, body.get("create"), &[A::createCollection, A::insert]);
    view_needs(db, body, needs);
}

/// A view's source and the collections its pipeline reads.
fn view_needs<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    if let Some(source) = body.get("viewOn") {
        needs.collection(db, Some(source), &[A::find]);
        let pipeline = body.get_array("pipeline").map(Vec::as_slice).unwrap_or(&[]);
        pipeline_needs(db, Some(source), pipeline, needs, 0);
    }
}

fn needs_of_coll_mod<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    needs.collection(db, body.get("collMod"), &[A::collMod]);
    view_needs(db, body, needs);
}

fn needs_of_rename<'a>(_db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let source = body
        .get_str("renameCollection")
        .ok()
        .and_then(|ns| ns.split_once('.'));
    let target = body.get_str("to").ok().and_then(|ns| ns.split_once('.'));
    let (Some((source_db, source_coll)), Some((target_db, target_coll))) = (source, target) else {
        return needs.cluster(&[A::renameCollection]);
    };
    if source_db == target_db {
        needs.database(source_db, &[A::renameCollectionSameDB]);
    } else {
        needs.namespace(source_db, source_coll, &[A::find]);
        needs.namespace(source_db, source_coll, &[A::dropCollection]);
        needs.namespace(target_db, target_coll, &[A::insert]);
        needs.namespace(target_db, target_coll, &[A::createIndex]);
    }
    if flag(body, "dropTarget") {
        needs.namespace(target_db, target_coll, &[A::dropCollection]);
    }
}

fn needs_of_clone_as_capped<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    needs.collection(db, body.get("cloneCollectionAsCapped"), &[A::find]);
    for action in [&[A::insert][..], &[A::createIndex], &[A::convertToCapped]] {
        needs.collection(db, body.get("toCollection"), action);
    }
}

fn needs_of_bulk_write<'a>(_db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let namespaces = body.get_array("nsInfo").map(Vec::as_slice).unwrap_or(&[]);
    let ns_of = |index: &Bson| {
        tideway_base::bsonutil::as_f64(index)
            .and_then(|index| namespaces.get(index as usize))
            .and_then(Bson::as_document)
            .and_then(|info| info.get("ns"))
    };
    for op in body
        .get_array("ops")
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(Bson::as_document)
    {
        let Some((kind, index)) = op.iter().next() else {
            continue;
        };
        let ns = ns_of(index);
        match kind.as_str() {
            "insert" => needs.full_namespace(ns, &[A::insert]),
            "delete" => needs.full_namespace(ns, &[A::remove]),
            _ => {
                needs.full_namespace(ns, &[A::update]);
                if flag(op, "upsert") {
                    needs.full_namespace(ns, &[A::insert]);
                }
            }
        }
    }
    if flag(body, "bypassDocumentValidation") {
        for info in namespaces.iter().filter_map(Bson::as_document) {
            needs.full_namespace(info.get("ns"), &[A::bypassDocumentValidation]);
        }
    }
}

fn needs_of_list_collections<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    // With `authorizedCollections` and `nameOnly`, any user may list what it has privileges
    // on (the handler filters); otherwise the database's `listCollections` action.
    if !(flag(body, "authorizedCollections") && flag(body, "nameOnly")) {
        needs.database(db, &[A::listCollections]);
    }
}

fn needs_of_current_op<'a>(_db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    if !flag(body, "$ownOps") {
        needs.cluster(&[A::inprog]);
    }
}

fn needs_of_kill_sessions<'a>(_db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    // Killing sessions by id kills the caller's own; patterns naming users need the action.
    let by_pattern = body.get_array("killSessions").is_ok_and(|sessions| {
        sessions
            .iter()
            .filter_map(Bson::as_document)
            .any(|s| !s.contains_key("id"))
    });
    if by_pattern {
        needs.cluster(&[A::killAnySession]);
    }
}

fn needs_of_user_admin<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let name = body.keys().next().map(String::as_str).unwrap_or_default();
    match name {
        "createUser" => needs.database(db, &[A::createUser]),
        "createRole" => needs.database(db, &[A::createRole]),
        "updateUser" => {
            if body.contains_key("pwd") {
                needs.database(db, &[A::changePassword]);
            }
            if body.contains_key("customData") {
                needs.database(db, &[A::changeCustomData]);
            }
        }
        _ => {}
    }
    let (granting, revoking) = match name {
        "revokeRolesFromUser" | "revokeRolesFromRole" | "revokePrivilegesFromRole" => (false, true),
        "updateUser" | "updateRole" => (true, true),
        _ => (true, false),
    };
    // Granting a role needs `grantRole` on its database, granting a privilege `grantRole` on
    // the database it targets (`admin` for the cluster and every multi-database pattern), as
    // mongod's checkAuthorizedToGrantRoles/Privileges; revoking likewise with `revokeRole`.
    let listed = |field: &str| body.get_array(field).map(Vec::as_slice).unwrap_or(&[]);
    let role_dbs = listed("roles")
        .iter()
        .filter_map(|role| name_and_db(role, "role", db))
        .map(|(_, role_db)| role_db);
    let privilege_dbs = listed("privileges")
        .iter()
        .filter_map(|privilege| privilege.as_document()?.get_document("resource").ok())
        .map(|resource| match resource.get_str("db") {
            Ok(target_db) if !target_db.is_empty() => target_db,
            _ => "admin",
        });
    for on in role_dbs.chain(privilege_dbs).collect::<Vec<_>>() {
        if granting {
            needs.database(on, &[A::grantRole]);
        }
        if revoking {
            needs.database(on, &[A::revokeRole]);
        }
    }
    if name == "updateUser" || name == "updateRole" {
        // Changing anything else still needs some administration of the database.
        if needs.entries.is_empty() {
            needs.database(db, &[A::changePassword, A::changeCustomData, A::grantRole]);
        }
    }
}

fn needs_of_users_info<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    match body.get("usersInfo") {
        Some(Bson::Document(query)) if flag(query, "forAllDBs") => needs.cluster(&[A::viewUser]),
        query => viewed_databases(query, "user", db, &[A::viewUser], needs),
    }
}

fn needs_of_roles_info<'a>(db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    viewed_databases(body.get("rolesInfo"), "role", db, &[A::viewRole], needs);
}

/// `usersInfo`/`rolesInfo`: `actions` on the database of each name asked for (one, or an
/// array), else on the command's database (`1`, or what the handler will refuse).
fn viewed_databases<'a>(
    query: Option<&'a Bson>,
    field: &str,
    db: &'a str,
    actions: &'static [Action],
    needs: &mut Needs<'a>,
) {
    let named = match query {
        Some(Bson::Array(names)) => names.as_slice(),
        Some(name @ (Bson::String(_) | Bson::Document(_))) => std::slice::from_ref(name),
        _ => &[],
    };
    if named.is_empty() {
        needs.database(db, actions);
    }
    for name in named {
        let on = name_and_db(name, field, db).map_or(db, |(_, on)| on);
        needs.database(on, actions);
    }
}

pub(crate) fn rule_needs<'a>(rule: Rule, db: &'a str, body: &'a Document, needs: &mut Needs<'a>) {
    let name = body.keys().next().map(String::as_str).unwrap_or_default();
    match rule {
        Rule::PreAuth | Rule::AnyUser => {}
        Rule::Collection(actions) => needs.collection(db, body.get(name), actions),
        Rule::Database(actions) => needs.database(db, actions),
        Rule::Cluster(actions) => needs.cluster(actions),
        Rule::Computed(compute) => compute(db, body, needs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn every_registered_command_has_a_rule() {
        for spec in crate::commands::all() {
            for name in std::iter::once(&spec.name).chain(spec.aliases) {
                assert!(rule(name).is_some(), "no authorization rule for {name}");
            }
        }
    }

    /// A target the test can keep after the command body is gone.
    #[derive(Debug, PartialEq)]
    enum OwnedTarget {
        Cluster,
        Database(String),
        Namespace(String, String),
    }

    fn needs(db: &str, body: Document) -> Vec<(OwnedTarget, Vec<&'static str>)> {
        let name = body.keys().next().unwrap().clone();
        let mut needs = Needs::default();
        rule_needs(rule(&name).unwrap(), db, &body, &mut needs);
        needs
            .entries
            .into_iter()
            .map(|(target, actions)| {
                let target = match target {
                    Target::Cluster => OwnedTarget::Cluster,
                    Target::Database(db) => OwnedTarget::Database(db.into()),
                    Target::Namespace(db, coll) => OwnedTarget::Namespace(db.into(), coll.into()),
                };
                (target, actions.iter().map(|a| a.name()).collect())
            })
            .collect()
    }

    fn ns(db: &str, coll: &str) -> OwnedTarget {
        OwnedTarget::Namespace(db.into(), coll.into())
    }

    // mongod's checks (MongoDB manual, "Privilege Actions": which action each command needs).
    #[test]
    fn writes_need_their_actions() {
        assert_eq!(
            needs(
                "d",
                doc! {"update": "c", "updates": [{"q": {}, "u": {}, "upsert": true}]}
            ),
            vec![
                (ns("d", "c"), vec!["update"]),
                (ns("d", "c"), vec!["insert"])
            ]
        );
        assert_eq!(
            needs("d", doc! {"findAndModify": "c", "remove": true}),
            vec![(ns("d", "c"), vec!["find"]), (ns("d", "c"), vec!["remove"])]
        );
        assert_eq!(
            needs(
                "d",
                doc! {"insert": "c", "documents": [], "bypassDocumentValidation": true}
            ),
            vec![
                (ns("d", "c"), vec!["insert"]),
                (ns("d", "c"), vec!["bypassDocumentValidation"])
            ]
        );
    }

    #[test]
    fn aggregate_needs_every_collection_it_reads_and_writes() {
        let body = doc! {"aggregate": "c", "pipeline": [
            {"$lookup": {"from": "other", "as": "x", "pipeline": [{"$unionWith": "third"}]}},
            {"$out": {"db": "out", "coll": "o"}},
        ]};
        assert_eq!(
            needs("d", body),
            vec![
                (ns("d", "c"), vec!["find"]),
                (ns("d", "other"), vec!["find"]),
                (ns("d", "third"), vec!["find"]),
                (ns("out", "o"), vec!["insert"]),
                (ns("out", "o"), vec!["remove"]),
            ]
        );
        let nested = (0..200).fold(Bson::Array(vec![]), |inner, _| {
            Bson::Array(vec![Bson::Document(doc! {"$facet": {"f": inner}})])
        });
        let deep = needs("d", doc! {"aggregate": "c", "pipeline": nested});
        assert!(deep.contains(&(OwnedTarget::Cluster, vec!["internal"])));
    }

    #[test]
    fn explain_needs_what_the_explained_command_needs() {
        assert_eq!(
            needs("d", doc! {"explain": {"delete": "c", "deletes": []}}),
            vec![(ns("d", "c"), vec!["remove"])]
        );
    }

    #[test]
    fn granting_privileges_needs_grant_role_where_they_point() {
        assert_eq!(
            needs(
                "app",
                doc! {"grantPrivilegesToRole": "r", "privileges": [
                    {"resource": {"db": "app", "collection": "c"}, "actions": ["find"]},
                    {"resource": {"cluster": true}, "actions": ["serverStatus"]},
                ]}
            ),
            vec![
                (OwnedTarget::Database("app".into()), vec!["grantRole"]),
                (OwnedTarget::Database("admin".into()), vec!["grantRole"]),
            ]
        );
        assert_eq!(
            needs(
                "app",
                doc! {"revokePrivilegesFromRole": "r", "privileges": [
                    {"resource": {"db": "", "collection": ""}, "actions": ["find"]},
                ]}
            ),
            vec![(OwnedTarget::Database("admin".into()), vec!["revokeRole"])]
        );
    }

    #[test]
    fn granting_roles_needs_grant_role_on_their_databases() {
        assert_eq!(
            needs(
                "app",
                doc! {"createUser": "u", "pwd": "p", "roles": ["read", {"role": "read", "db": "other"}]}
            ),
            vec![
                (OwnedTarget::Database("app".into()), vec!["createUser"]),
                (OwnedTarget::Database("app".into()), vec!["grantRole"]),
                (OwnedTarget::Database("other".into()), vec!["grantRole"]),
            ]
        );
    }
}
