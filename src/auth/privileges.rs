//! The authorization model, as mongod's: actions, resource patterns, privileges (a pattern and
//! the actions granted on it), sets of privileges and how a request for an action on a resource
//! is matched against them, and mongod's built-in roles as privileges.
//!
//! Invariants: matching follows mongod's resource search order (`AuthorizationSession`'s
//! resource search list): a namespace is matched by its exact pattern, by its collection name in
//! any database, and, if it is a normal collection (not `system.*`), by its database and (outside
//! `local` and `config`) by "any normal resource"; a database by itself and (outside `local` and
//! `config`) by "any normal resource"; the cluster by itself; everything by "any resource".
//! Built-in roles grant exactly the actions of mongod's `builtin_roles` (MongoDB manual, "Built-In
//! Roles"), restricted to the actions that exist.

use std::fmt;

use bson::{doc, Bson, Document};

macro_rules! actions {
    ($($name:ident),* $(,)?) => {
        /// An action a privilege grants: mongod's `ActionType`, named exactly as mongod names it.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Action { $($name),* }

        impl Action {
            pub const ALL: &'static [Action] = &[$(Action::$name),*];

            pub fn name(self) -> &'static str {
                match self { $(Action::$name => stringify!($name)),* }
            }

            pub fn from_name(name: &str) -> Option<Action> {
                match name { $(stringify!($name) => Some(Action::$name),)* _ => None }
            }
        }
    };
}

actions! {
    addShard, advanceClusterTime, allCollectionStats, analyze, analyzeShardKey, anyAction,
    appendOplogNote, applicationMessage, applyOps, auditConfigure, auditLogRotate, authCheck,
    authenticate, authSchemaUpgrade, bypassDocumentValidation, bypassWriteBlockingMode,
    changeCustomData, changeOwnCustomData, changeOwnPassword, changePassword, changeStream,
    checkFreeMonitoringStatus, checkMetadataConsistency, cleanupOrphaned,
    cleanupStructuredEncryptionData, clearJumboFlag, closeAllDatabases, collMod, collStats,
    compact, compactStructuredEncryptionData, configureQueryAnalyzer, connPoolStats,
    connPoolSync, convertToCapped, cpuProfiler, createCollection, createDatabase, createIndex,
    createRole, createSearchIndexes, createUser, dbCheck, dbHash, dbStats,
    dropAllRolesFromDatabase, dropAllUsersFromDatabase, dropCollection, dropConnections,
    dropDatabase, dropIndex, dropRole, dropSearchIndex, dropUser, emptycapped, enableProfiler,
    enableSharding, exportCollection, find, flushRouterConfig, forceUUID, fsync, fsyncUnlock,
    getChangeStreamState, getClusterParameter, getCmdLineOpts, getDatabaseVersion,
    getDefaultRWConcern, getLog, getParameter, getShardMap, getShardVersion, grantPrivilegesToRole,
    grantRole, grantRolesToRole, grantRolesToUser, hostInfo, impersonate, importCollection,
    indexStats, inprog, insert, internal, invalidateUserCache, issueDirectShardOperations,
    killAnyCursor, killAnySession, killCursors, killop, listCachedAndActiveUsers, listCollections,
    listCursors, listDatabases, listIndexes, listSampledQueries, listSearchIndexes, listSessions,
    listShards, logRotate, moveChunk, moveCollection, netstat, oidcListKeys, oidcRefreshKeys,
    oidReset, operationMetrics, planCacheIndexFilter, planCacheRead, planCacheWrite,
    querySettings, queryStatsRead, queryStatsReadTransformed, refineCollectionShardKey, reIndex,
    remove, removeShard, renameCollection, renameCollectionSameDB, repairDatabase,
    replSetConfigure, replSetGetConfig, replSetGetStatus, replSetHeartbeat, replSetReconfig,
    replSetResizeOplog, replSetStateChange, reshardCollection, resync, revokePrivilegesFromRole,
    revokeRole, revokeRolesFromRole, revokeRolesFromUser, rotateCertificates,
    runAsLessPrivilegedUser, runTenantMigration, serverStatus, setAuthenticationRestriction,
    setChangeStreamState, setClusterParameter, setDefaultRWConcern, setFeatureCompatibilityVersion,
    setFreeMonitoring, setParameter, setUserWriteBlockMode, shardCollection,
    shardedDataDistribution, shardingState, shutdown, splitChunk, splitVector, storageDetails,
    top, touch, trafficRecord, transitionFromDedicatedConfigServer,
    transitionToDedicatedConfigServer, unlock, update, updateRole, updateSearchIndex, updateUser,
    useTenant, useUUID, validate, viewRole, viewUser,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of actions, as bits: matching is a mask test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ActionSet([u64; 3]);

const _: () = assert!(Action::ALL.len() <= 3 * 64);

impl ActionSet {
    pub fn of(actions: &[Action]) -> ActionSet {
        let mut set = ActionSet::default();
        for &action in actions {
            set.insert(action);
        }
        set
    }

    pub fn insert(&mut self, action: Action) {
        let bit = action as usize;
        self.0[bit / 64] |= 1 << (bit % 64);
    }

    pub fn union(&mut self, other: ActionSet) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine |= theirs;
        }
    }

    /// Removes `other`'s actions; whether any remain.
    pub(crate) fn remove_all(&mut self, other: ActionSet) -> bool {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine &= !theirs;
        }
        !self.is_empty()
    }

    fn has(&self, action: Action) -> bool {
        let bit = action as usize;
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Whether the set has `action` (or mongod's `anyAction`, which stands for every action).
    pub fn contains(&self, action: Action) -> bool {
        self.has(action) || self.has(Action::anyAction)
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 3]
    }

    /// The actions, in mongod's name order (how `rolesInfo` lists them).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Action::ALL
            .iter()
            .filter(|&&action| self.has(action))
            .map(|action| action.name())
            .collect();
        names.sort_unstable();
        names
    }
}

/// What a privilege applies to (mongod's `ResourcePattern`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourcePattern {
    /// `{anyResource: true}`.
    AnyResource,
    /// `{db: "", collection: ""}`: every database and normal collection outside `local`/`config`.
    AnyNormal,
    /// `{cluster: true}`.
    Cluster,
    /// `{db: "<db>", collection: ""}`: the database and its normal collections.
    Database(String),
    /// `{db: "", collection: "<coll>"}`: that collection name in every database.
    CollectionName(String),
    /// `{db: "<db>", collection: "<coll>"}`.
    Namespace(String, String),
    /// `{db: "", system_buckets: ""}`: every time-series buckets collection.
    AnySystemBuckets,
}

impl ResourcePattern {
    /// The pattern as mongod writes it in role and privilege documents.
    pub fn to_document(&self) -> Document {
        match self {
            ResourcePattern::AnyResource => doc! {"anyResource": true},
            ResourcePattern::AnyNormal => doc! {"db": "", "collection": ""},
            ResourcePattern::Cluster => doc! {"cluster": true},
            ResourcePattern::Database(db) => doc! {"db": db, "collection": ""},
            ResourcePattern::CollectionName(coll) => doc! {"db": "", "collection": coll},
            ResourcePattern::Namespace(db, coll) => doc! {"db": db, "collection": coll},
            ResourcePattern::AnySystemBuckets => doc! {"db": "", "system_buckets": ""},
        }
    }

    /// Reads a `resource` document (`createRole`'s privileges); `Err` carries mongod's message.
    pub fn from_document(resource: &Document) -> Result<ResourcePattern, String> {
        let text = |field: &str| -> Result<Option<&str>, String> {
            match resource.get(field) {
                None => Ok(None),
                Some(Bson::String(value)) => Ok(Some(value.as_str())),
                Some(_) => Err(format!("resource field \"{field}\" must be a string")),
            }
        };
        let flag = |field: &str| {
            resource
                .get(field)
                .map(|value| value == &Bson::Boolean(true))
        };
        for field in resource.keys() {
            if ![
                "db",
                "collection",
                "cluster",
                "anyResource",
                "system_buckets",
            ]
            .contains(&field.as_str())
            {
                return Err(format!(
                    "BSON field 'resource.{field}' is an unknown field."
                ));
            }
        }
        let pattern =
            match (
                flag("anyResource"),
                flag("cluster"),
                text("db")?,
                text("collection")?,
                text("system_buckets")?,
            ) {
                (Some(true), None, None, None, None) => ResourcePattern::AnyResource,
                (None, Some(true), None, None, None) => ResourcePattern::Cluster,
                (None, None, Some(""), None, Some("")) => ResourcePattern::AnySystemBuckets,
                (None, None, Some(db), Some(coll), None) => match (db, coll) {
                    ("", "") => ResourcePattern::AnyNormal,
                    (db, "") => ResourcePattern::Database(db.to_owned()),
                    ("", coll) => ResourcePattern::CollectionName(coll.to_owned()),
                    (db, coll) => ResourcePattern::Namespace(db.to_owned(), coll.to_owned()),
                },
                (Some(false), ..) | (_, Some(false), ..) => {
                    return Err("resource field \"anyResource\"/\"cluster\" must be true".into())
                }
                _ => return Err(
                    "resource must have exactly one of anyResource, cluster, or db and collection"
                        .into(),
                ),
            };
        Ok(pattern)
    }
}

/// What a command acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    Cluster,
    Database(&'a str),
    Namespace(&'a str, &'a str),
}

/// Collections mongod keeps out of "normal" resources.
fn is_normal_collection(db: &str, coll: &str) -> bool {
    !(coll.starts_with("system.") || (db == "local" && coll.starts_with("replset.")))
}

fn is_system_buckets(coll: &str) -> bool {
    coll.starts_with("system.buckets.")
}

impl ResourcePattern {
    /// Whether this pattern covers `target` (mongod's resource search list, see the module doc).
    pub fn matches(&self, target: Target<'_>) -> bool {
        let special_db = |db: &str| db == "local" || db == "config";
        match (self, target) {
            (ResourcePattern::AnyResource, _) => true,
            (ResourcePattern::Cluster, Target::Cluster) => true,
            (ResourcePattern::AnyNormal, Target::Database(db)) => !special_db(db),
            (ResourcePattern::AnyNormal, Target::Namespace(db, coll)) => {
                !special_db(db) && is_normal_collection(db, coll)
            }
            (ResourcePattern::Database(pattern), Target::Database(db)) => pattern == db,
            (ResourcePattern::Database(pattern), Target::Namespace(db, coll)) => {
                pattern == db && is_normal_collection(db, coll)
            }
            (ResourcePattern::CollectionName(pattern), Target::Namespace(_, coll)) => {
                pattern == coll
            }
            (ResourcePattern::Namespace(pdb, pcoll), Target::Namespace(db, coll)) => {
                pdb == db && pcoll == coll
            }
            (ResourcePattern::AnySystemBuckets, Target::Namespace(_, coll)) => {
                is_system_buckets(coll)
            }
            _ => false,
        }
    }
}

/// Actions granted on a resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Privilege {
    pub resource: ResourcePattern,
    pub actions: ActionSet,
}

impl Privilege {
    pub fn to_document(&self) -> Document {
        doc! {"resource": self.resource.to_document(), "actions": self.actions.names()}
    }
}

/// The privileges of a user (the union over its roles), one entry per resource pattern.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrivilegeSet {
    privileges: Vec<Privilege>,
}

impl PrivilegeSet {
    /// Adds `actions` on `resource`, merging with what the set already grants there.
    pub fn grant(&mut self, resource: ResourcePattern, actions: ActionSet) {
        match self.privileges.iter_mut().find(|p| p.resource == resource) {
            Some(existing) => existing.actions.union(actions),
            None => self.privileges.push(Privilege { resource, actions }),
        }
    }

    pub fn extend(&mut self, other: &PrivilegeSet) {
        for privilege in &other.privileges {
            self.grant(privilege.resource.clone(), privilege.actions);
        }
    }

    pub fn allows(&self, target: Target<'_>, action: Action) -> bool {
        self.privileges
            .iter()
            .any(|p| p.actions.contains(action) && p.resource.matches(target))
    }

    /// Whether any action at all is granted on `target` (what `listCollections` with
    /// `authorizedCollections` shows a user without the `listCollections` action).
    pub(crate) fn allows_any_action(&self, target: Target<'_>) -> bool {
        self.privileges
            .iter()
            .any(|p| !p.actions.is_empty() && p.resource.matches(target))
    }

    /// Whether anything at all is granted on `db` or a collection in it (what `listDatabases`
    /// shows a user without the `listDatabases` action, as mongod's `authorizedDatabases`).
    pub(crate) fn touches_database(&self, db: &str) -> bool {
        self.privileges.iter().any(|p| match &p.resource {
            ResourcePattern::AnyResource => true,
            ResourcePattern::AnyNormal => db != "local" && db != "config",
            ResourcePattern::Database(pattern) | ResourcePattern::Namespace(pattern, _) => {
                pattern == db
            }
            _ => false,
        })
    }

    /// The privileges sorted by resource (how `rolesInfo`/`connectionStatus` list them).
    pub fn privileges(&self) -> Vec<&Privilege> {
        let mut privileges: Vec<&Privilege> = self.privileges.iter().collect();
        privileges.sort_by(|a, b| a.resource.cmp(&b.resource));
        privileges
    }
}

/// A role grant inside a built-in role: a role on the same database, or on a named one.
type SubRole = (&'static str, Option<&'static str>);

/// Where a built-in role's privilege applies.
#[derive(Clone, Copy)]
enum Scope {
    /// The database the role is granted on.
    OwnDatabase,
    Database(&'static str),
    /// A collection name: on the role's database, or (for admin-only roles) in every database.
    Collection(&'static str),
    Namespace(&'static str, &'static str),
    AnyNormal,
    Cluster,
    Any,
    AnySystemBuckets,
}

struct BuiltinRole {
    name: &'static str,
    /// Exists only on `admin`.
    admin_only: bool,
    roles: &'static [SubRole],
    grants: &'static [(Scope, &'static [&'static [Action]])],
}

use Action as A;

const READ: &[Action] = &[
    A::changeStream,
    A::collStats,
    A::dbHash,
    A::dbStats,
    A::find,
    A::killCursors,
    A::listCollections,
    A::listIndexes,
    A::listSearchIndexes,
    A::planCacheRead,
];
const WRITE: &[Action] = &[
    A::cleanupStructuredEncryptionData,
    A::compactStructuredEncryptionData,
    A::convertToCapped,
    A::createCollection,
    A::createIndex,
    A::createSearchIndexes,
    A::dropCollection,
    A::dropIndex,
    A::dropSearchIndex,
    A::insert,
    A::remove,
    A::renameCollectionSameDB,
    A::update,
    A::updateSearchIndex,
];
const USER_ADMIN: &[Action] = &[
    A::changeCustomData,
    A::changePassword,
    A::createUser,
    A::createRole,
    A::dropUser,
    A::dropRole,
    A::grantRole,
    A::revokeRole,
    A::setAuthenticationRestriction,
    A::viewUser,
    A::viewRole,
];
const DB_ADMIN: &[Action] = &[
    A::analyze,
    A::bypassDocumentValidation,
    A::collMod,
    A::collStats,
    A::compact,
    A::convertToCapped,
    A::createCollection,
    A::dbStats,
    A::dropCollection,
    A::dropDatabase,
    A::dropIndex,
    A::dropSearchIndex,
    A::createIndex,
    A::createSearchIndexes,
    A::enableProfiler,
    A::listCollections,
    A::listIndexes,
    A::listSearchIndexes,
    A::updateSearchIndex,
    A::planCacheIndexFilter,
    A::planCacheRead,
    A::planCacheWrite,
    A::reIndex,
    A::renameCollectionSameDB,
    A::storageDetails,
    A::validate,
    A::configureQueryAnalyzer,
];
const PROFILE_ADMIN: &[Action] = &[A::convertToCapped, A::createCollection, A::dropCollection];
const INDEX_ADMIN: &[Action] = &[
    A::createIndex,
    A::createSearchIndexes,
    A::dropIndex,
    A::dropSearchIndex,
];
const CLUSTER_MONITOR_CLUSTER: &[Action] = &[
    A::connPoolStats,
    A::getCmdLineOpts,
    A::getDefaultRWConcern,
    A::getLog,
    A::getParameter,
    A::getShardMap,
    A::hostInfo,
    A::listDatabases,
    A::listSampledQueries,
    A::listSessions,
    A::listShards,
    A::netstat,
    A::operationMetrics,
    A::replSetGetConfig,
    A::replSetGetStatus,
    A::serverStatus,
    A::top,
    A::useUUID,
    A::inprog,
    A::shardingState,
    A::allCollectionStats,
    A::shardedDataDistribution,
];
const CLUSTER_MONITOR_DATABASE: &[Action] = &[
    A::collStats,
    A::dbStats,
    A::getDatabaseVersion,
    A::getShardVersion,
    A::indexStats,
];
const HOST_MANAGER_CLUSTER: &[Action] = &[
    A::applicationMessage,
    A::auditConfigure,
    A::connPoolSync,
    A::dropConnections,
    A::logRotate,
    A::oidReset,
    A::setParameter,
    A::shutdown,
    A::touch,
    A::unlock,
    A::flushRouterConfig,
    A::fsync,
    A::invalidateUserCache,
    A::killAnyCursor,
    A::killAnySession,
    A::killop,
    A::replSetResizeOplog,
    A::resync,
    A::trafficRecord,
    A::rotateCertificates,
    A::oidcListKeys,
    A::oidcRefreshKeys,
];
const CLUSTER_MANAGER_CLUSTER: &[Action] = &[
    A::appendOplogNote,
    A::applicationMessage,
    A::replSetConfigure,
    A::replSetGetConfig,
    A::replSetGetStatus,
    A::replSetStateChange,
    A::resync,
    A::addShard,
    A::removeShard,
    A::listSessions,
    A::listShards,
    A::flushRouterConfig,
    A::cleanupOrphaned,
    A::getDefaultRWConcern,
    A::runTenantMigration,
    A::setDefaultRWConcern,
    A::setFeatureCompatibilityVersion,
    A::setClusterParameter,
    A::getClusterParameter,
    A::setChangeStreamState,
    A::getChangeStreamState,
    A::querySettings,
    A::queryStatsRead,
    A::queryStatsReadTransformed,
    A::checkMetadataConsistency,
    A::transitionFromDedicatedConfigServer,
    A::transitionToDedicatedConfigServer,
];
const CLUSTER_MANAGER_DATABASE: &[Action] = &[
    A::analyzeShardKey,
    A::configureQueryAnalyzer,
    A::clearJumboFlag,
    A::splitChunk,
    A::moveChunk,
    A::moveCollection,
    A::enableSharding,
    A::splitVector,
    A::refineCollectionShardKey,
    A::reshardCollection,
];
const CLUSTER_MANAGER_WRITE: &[Action] = &[A::insert, A::update, A::remove];
const RESTORE_WRITE: &[Action] = &[
    A::bypassDocumentValidation,
    A::collMod,
    A::convertToCapped,
    A::createCollection,
    A::createIndex,
    A::createSearchIndexes,
    A::dropCollection,
    A::insert,
    A::updateSearchIndex,
];

const BUILTIN_ROLES: &[BuiltinRole] = &[
    BuiltinRole {
        name: "read",
        admin_only: false,
        roles: &[],
        grants: &[
            (Scope::OwnDatabase, &[READ]),
            (Scope::Collection("system.js"), &[READ]),
        ],
    },
    BuiltinRole {
        name: "readWrite",
        admin_only: false,
        roles: &[],
        grants: &[
            (Scope::OwnDatabase, &[READ, WRITE]),
            (Scope::Collection("system.js"), &[READ, WRITE]),
        ],
    },
    BuiltinRole {
        name: "userAdmin",
        admin_only: false,
        roles: &[],
        grants: &[(Scope::OwnDatabase, &[USER_ADMIN])],
    },
    BuiltinRole {
        name: "dbAdmin",
        admin_only: false,
        roles: &[],
        grants: &[
            (Scope::OwnDatabase, &[DB_ADMIN]),
            (Scope::Collection("system.profile"), &[READ, PROFILE_ADMIN]),
        ],
    },
    BuiltinRole {
        name: "dbOwner",
        admin_only: false,
        roles: &[("readWrite", None), ("dbAdmin", None), ("userAdmin", None)],
        grants: &[],
    },
    BuiltinRole {
        name: "enableSharding",
        admin_only: false,
        roles: &[],
        grants: &[(
            Scope::AnyNormal,
            &[&[
                A::analyzeShardKey,
                A::enableSharding,
                A::moveCollection,
                A::refineCollectionShardKey,
                A::reshardCollection,
            ]],
        )],
    },
    BuiltinRole {
        name: "readAnyDatabase",
        admin_only: true,
        roles: &[],
        grants: &[
            (Scope::AnyNormal, &[READ]),
            (Scope::Cluster, &[&[A::listDatabases]]),
            (Scope::Collection("system.js"), &[READ]),
            (Scope::AnySystemBuckets, &[READ]),
        ],
    },
    BuiltinRole {
        name: "readWriteAnyDatabase",
        admin_only: true,
        roles: &[("readAnyDatabase", None)],
        grants: &[
            (Scope::AnyNormal, &[READ, WRITE]),
            (Scope::Collection("system.js"), &[READ, WRITE]),
            (Scope::AnySystemBuckets, &[READ, WRITE]),
        ],
    },
    BuiltinRole {
        name: "userAdminAnyDatabase",
        admin_only: true,
        roles: &[],
        grants: &[
            (
                Scope::AnyNormal,
                &[USER_ADMIN, &[A::listCachedAndActiveUsers]],
            ),
            (Scope::Database("local"), &[USER_ADMIN]),
            (Scope::Database("config"), &[USER_ADMIN]),
            (
                Scope::Cluster,
                &[&[
                    A::listDatabases,
                    A::authSchemaUpgrade,
                    A::invalidateUserCache,
                    A::viewUser,
                ]],
            ),
            (
                Scope::Namespace("admin", "system.users"),
                &[READ, INDEX_ADMIN],
            ),
            (
                Scope::Namespace("admin", "system.roles"),
                &[READ, INDEX_ADMIN],
            ),
            (Scope::Collection("system.users"), &[READ]),
            (Scope::Namespace("admin", "system.version"), &[READ]),
            (Scope::Namespace("admin", "system.backup_users"), &[READ]),
        ],
    },
    BuiltinRole {
        name: "dbAdminAnyDatabase",
        admin_only: true,
        roles: &[],
        grants: &[
            (Scope::Cluster, &[&[A::listDatabases, A::applyOps]]),
            (Scope::AnyNormal, &[DB_ADMIN]),
            (Scope::Collection("system.profile"), &[READ, PROFILE_ADMIN]),
            (Scope::AnySystemBuckets, &[DB_ADMIN]),
        ],
    },
    BuiltinRole {
        name: "clusterMonitor",
        admin_only: true,
        roles: &[("read", Some("config")), ("read", Some("local"))],
        grants: &[
            (Scope::Cluster, &[CLUSTER_MONITOR_CLUSTER]),
            (Scope::AnyNormal, &[CLUSTER_MONITOR_DATABASE]),
            (Scope::Database("config"), &[CLUSTER_MONITOR_DATABASE]),
            (
                Scope::Namespace("config", "system.sessions"),
                &[CLUSTER_MONITOR_DATABASE],
            ),
            (Scope::Database("local"), &[CLUSTER_MONITOR_DATABASE]),
            (Scope::Namespace("local", "system.replset"), &[&[A::find]]),
            (Scope::Namespace("local", "replset.election"), &[&[A::find]]),
            (Scope::Namespace("local", "replset.minvalid"), &[&[A::find]]),
            (Scope::Collection("system.profile"), &[&[A::find]]),
        ],
    },
    BuiltinRole {
        name: "hostManager",
        admin_only: true,
        roles: &[],
        grants: &[
            (Scope::Cluster, &[HOST_MANAGER_CLUSTER]),
            (Scope::AnyNormal, &[&[A::killCursors]]),
        ],
    },
    BuiltinRole {
        name: "clusterManager",
        admin_only: true,
        roles: &[("read", Some("config"))],
        grants: &[
            (Scope::Cluster, &[CLUSTER_MANAGER_CLUSTER]),
            (Scope::AnyNormal, &[CLUSTER_MANAGER_DATABASE]),
            (Scope::AnySystemBuckets, &[CLUSTER_MANAGER_DATABASE]),
            (Scope::Database("config"), &[CLUSTER_MANAGER_DATABASE]),
            (Scope::Database("local"), &[CLUSTER_MANAGER_DATABASE]),
            (Scope::Namespace("local", "system.replset"), &[READ]),
            (Scope::Any, &[&[A::dbCheck]]),
            (Scope::Namespace("local", "system.healthlog"), &[READ]),
            (Scope::Database("config"), &[CLUSTER_MANAGER_WRITE]),
            (Scope::Database("local"), &[CLUSTER_MANAGER_WRITE]),
            (
                Scope::Namespace("local", "replset.election"),
                &[CLUSTER_MANAGER_WRITE],
            ),
            (
                Scope::Namespace("local", "replset.minvalid"),
                &[CLUSTER_MANAGER_WRITE],
            ),
        ],
    },
    BuiltinRole {
        name: "clusterAdmin",
        admin_only: true,
        roles: &[
            ("clusterMonitor", None),
            ("hostManager", None),
            ("clusterManager", None),
        ],
        grants: &[
            (Scope::AnyNormal, &[&[A::dropDatabase]]),
            (Scope::Any, &[&[A::importCollection, A::exportCollection]]),
        ],
    },
    BuiltinRole {
        name: "backup",
        admin_only: true,
        roles: &[],
        grants: &[
            // mongod's `__queryableBackup`, which `backup` holds.
            (
                Scope::Any,
                &[&[
                    A::collStats,
                    A::listCollections,
                    A::listIndexes,
                    A::listSearchIndexes,
                ]],
            ),
            (Scope::AnyNormal, &[&[A::find]]),
            (Scope::AnySystemBuckets, &[&[A::find]]),
            (
                Scope::Cluster,
                &[&[A::getParameter, A::listDatabases, A::useUUID]],
            ),
            (Scope::Database("config"), &[&[A::find]]),
            (Scope::Database("local"), &[&[A::find]]),
            (Scope::Namespace("local", "replset.election"), &[&[A::find]]),
            (Scope::Namespace("local", "replset.minvalid"), &[&[A::find]]),
            (Scope::Collection("system.js"), &[&[A::find]]),
            (Scope::Collection("system.users"), &[&[A::find]]),
            (Scope::Collection("system.profile"), &[&[A::find]]),
            (
                Scope::Namespace("admin", "system.backup_users"),
                &[&[A::find]],
            ),
            (Scope::Namespace("admin", "system.roles"), &[&[A::find]]),
            (Scope::Namespace("admin", "system.version"), &[&[A::find]]),
            (Scope::Namespace("config", "settings"), &[&[A::find]]),
            // `backup`'s own.
            (
                Scope::Cluster,
                &[&[
                    A::appendOplogNote,
                    A::serverStatus,
                    A::setUserWriteBlockMode,
                ]],
            ),
            (
                Scope::Namespace("config", "settings"),
                &[&[A::insert, A::update]],
            ),
        ],
    },
    BuiltinRole {
        name: "restore",
        admin_only: true,
        roles: &[],
        grants: &[
            (
                Scope::Cluster,
                &[&[
                    A::getParameter,
                    A::forceUUID,
                    A::useUUID,
                    A::bypassWriteBlockingMode,
                    A::setUserWriteBlockMode,
                    A::applyOps,
                ]],
            ),
            (Scope::Database("local"), &[RESTORE_WRITE]),
            (Scope::Database("config"), &[RESTORE_WRITE]),
            (Scope::AnySystemBuckets, &[RESTORE_WRITE]),
            (
                Scope::Namespace("local", "system.replset"),
                &[RESTORE_WRITE],
            ),
            (
                Scope::Namespace("local", "replset.election"),
                &[RESTORE_WRITE],
            ),
            (
                Scope::Namespace("local", "replset.minvalid"),
                &[RESTORE_WRITE],
            ),
            (Scope::Any, &[&[A::listCollections]]),
            (Scope::AnyNormal, &[RESTORE_WRITE, USER_ADMIN]),
            (Scope::Collection("system.js"), &[RESTORE_WRITE]),
            (Scope::Namespace("admin", "tempusers"), &[&[A::find]]),
            (Scope::Namespace("admin", "temproles"), &[&[A::find]]),
            (
                Scope::Namespace("admin", "system.backup_users"),
                &[RESTORE_WRITE],
            ),
            (
                Scope::Namespace("admin", "system.version"),
                &[RESTORE_WRITE, &[A::find]],
            ),
            (
                Scope::Collection("system.users"),
                &[RESTORE_WRITE, &[A::find, A::update, A::remove]],
            ),
            (
                Scope::Namespace("admin", "system.roles"),
                &[&[A::createIndex]],
            ),
        ],
    },
    BuiltinRole {
        name: "root",
        admin_only: true,
        roles: &[
            ("clusterAdmin", None),
            ("userAdminAnyDatabase", None),
            ("dbAdminAnyDatabase", None),
            ("readWriteAnyDatabase", None),
            ("backup", None),
            ("restore", None),
        ],
        grants: &[
            (Scope::Any, &[&[A::validate]]),
            (
                Scope::Namespace("config", "system.preimages"),
                &[&[A::find, A::remove]],
            ),
        ],
    },
];

fn builtin(name: &str, db: &str) -> Option<&'static BuiltinRole> {
    BUILTIN_ROLES
        .iter()
        .find(|role| role.name == name && (!role.admin_only || db == "admin"))
}

/// Whether `role` on `db` is one of mongod's built-in roles.
pub(crate) fn is_builtin_role(role: &str, db: &str) -> bool {
    builtin(role, db).is_some()
}

/// The built-in roles that exist on `db` (`rolesInfo`'s `showBuiltinRoles`).
pub(crate) fn builtin_role_names(db: &str) -> impl Iterator<Item = &'static str> + '_ {
    BUILTIN_ROLES
        .iter()
        .filter(move |role| !role.admin_only || db == "admin")
        .map(|role| role.name)
}

/// The roles a built-in role holds directly, as `(role, db)`.
pub(crate) fn builtin_subroles(role: &str, db: &str) -> Vec<(&'static str, String)> {
    builtin(role, db)
        .map(|builtin| {
            builtin
                .roles
                .iter()
                .map(|(name, on)| (*name, on.unwrap_or(db).to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The privileges a built-in role grants by itself (without the roles it holds); `None` if
/// `role` on `db` is not built in.
pub(crate) fn builtin_privileges(role: &str, db: &str) -> Option<PrivilegeSet> {
    let builtin = builtin(role, db)?;
    let mut set = PrivilegeSet::default();
    for (scope, action_lists) in builtin.grants {
        let mut actions = ActionSet::default();
        for list in *action_lists {
            actions.union(ActionSet::of(list));
        }
        let resource = match *scope {
            Scope::OwnDatabase => ResourcePattern::Database(db.to_owned()),
            Scope::Database(on) => ResourcePattern::Database(on.to_owned()),
            // A database role's collection is the one in its database; an admin-only role's is
            // the name in every database.
            Scope::Collection(coll) if builtin.admin_only => {
                ResourcePattern::CollectionName(coll.to_owned())
            }
            Scope::Collection(coll) => ResourcePattern::Namespace(db.to_owned(), coll.to_owned()),
            Scope::Namespace(on, coll) => {
                ResourcePattern::Namespace(on.to_owned(), coll.to_owned())
            }
            Scope::AnyNormal => ResourcePattern::AnyNormal,
            Scope::Cluster => ResourcePattern::Cluster,
            Scope::Any => ResourcePattern::AnyResource,
            Scope::AnySystemBuckets => ResourcePattern::AnySystemBuckets,
        };
        set.grant(resource, actions);
    }
    Some(set)
}

/// The privileges of built-in `role` on `db` with every role it holds, transitively.
pub(crate) fn builtin_privileges_transitive(role: &str, db: &str) -> Option<PrivilegeSet> {
    let mut set = builtin_privileges(role, db)?;
    // Built-in roles nest at most three deep (root → clusterAdmin → clusterMonitor → read).
    let mut pending = builtin_subroles(role, db);
    let mut seen: Vec<(&'static str, String)> = Vec::new();
    while let Some((name, on)) = pending.pop() {
        if seen.contains(&(name, on.clone())) {
            continue;
        }
        if let Some(privileges) = builtin_privileges(name, &on) {
            set.extend(&privileges);
        }
        pending.extend(builtin_subroles(name, &on));
        seen.push((name, on));
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(role: &str, db: &str, target: Target<'_>, action: Action) -> bool {
        builtin_privileges_transitive(role, db)
            .unwrap()
            .allows(target, action)
    }

    #[test]
    fn action_names_round_trip() {
        for &action in Action::ALL {
            assert_eq!(Action::from_name(action.name()), Some(action));
        }
        assert_eq!(Action::from_name("fly"), None);
    }

    // The manual's "Built-In Roles": read and readWrite apply to the role's database only,
    // never to its system collections (except system.js).
    #[test]
    fn database_roles_cover_their_database() {
        assert!(allows(
            "read",
            "app",
            Target::Namespace("app", "c"),
            A::find
        ));
        assert!(!allows(
            "read",
            "app",
            Target::Namespace("app", "c"),
            A::insert
        ));
        assert!(!allows(
            "read",
            "app",
            Target::Namespace("other", "c"),
            A::find
        ));
        assert!(allows(
            "read",
            "app",
            Target::Database("app"),
            A::listCollections
        ));
        assert!(!allows(
            "read",
            "app",
            Target::Namespace("app", "system.users"),
            A::find
        ));
        assert!(allows(
            "read",
            "app",
            Target::Namespace("app", "system.js"),
            A::find
        ));
        assert!(allows(
            "readWrite",
            "app",
            Target::Namespace("app", "c"),
            A::insert
        ));
        assert!(!allows(
            "readWrite",
            "app",
            Target::Database("app"),
            A::dropDatabase
        ));
        assert!(allows(
            "dbOwner",
            "app",
            Target::Database("app"),
            A::dropDatabase
        ));
        assert!(allows(
            "dbOwner",
            "app",
            Target::Database("app"),
            A::createUser
        ));
        assert!(!allows(
            "dbAdmin",
            "app",
            Target::Namespace("app", "c"),
            A::find
        ));
        assert!(allows(
            "dbAdmin",
            "app",
            Target::Namespace("app", "system.profile"),
            A::find
        ));
    }

    #[test]
    fn any_database_roles_skip_local_and_config() {
        assert!(allows(
            "readAnyDatabase",
            "admin",
            Target::Namespace("x", "c"),
            A::find
        ));
        assert!(allows(
            "readAnyDatabase",
            "admin",
            Target::Cluster,
            A::listDatabases
        ));
        assert!(!allows(
            "readAnyDatabase",
            "admin",
            Target::Namespace("local", "c"),
            A::find
        ));
        assert!(!allows(
            "readAnyDatabase",
            "admin",
            Target::Namespace("x", "c"),
            A::insert
        ));
        assert!(allows(
            "readWriteAnyDatabase",
            "admin",
            Target::Namespace("x", "c"),
            A::insert
        ));
        assert!(allows(
            "readWriteAnyDatabase",
            "admin",
            Target::Cluster,
            A::listDatabases
        ));
        assert!(builtin_privileges("readAnyDatabase", "app").is_none());
    }

    #[test]
    fn cluster_roles_and_root() {
        assert!(allows(
            "clusterMonitor",
            "admin",
            Target::Cluster,
            A::serverStatus
        ));
        assert!(!allows(
            "clusterMonitor",
            "admin",
            Target::Cluster,
            A::killop
        ));
        assert!(allows(
            "clusterMonitor",
            "admin",
            Target::Namespace("config", "c"),
            A::find
        ));
        assert!(allows("clusterAdmin", "admin", Target::Cluster, A::killop));
        assert!(allows(
            "clusterAdmin",
            "admin",
            Target::Database("x"),
            A::dropDatabase
        ));
        assert!(!allows(
            "clusterAdmin",
            "admin",
            Target::Namespace("x", "c"),
            A::find
        ));
        for (target, action) in [
            (Target::Namespace("x", "c"), A::insert),
            (Target::Database("x"), A::dropDatabase),
            (Target::Database("x"), A::createUser),
            (Target::Cluster, A::shutdown),
            (Target::Namespace("admin", "system.users"), A::find),
        ] {
            assert!(
                allows("root", "admin", target, action),
                "{target:?} {action}"
            );
        }
    }

    #[test]
    fn resource_documents_round_trip() {
        for pattern in [
            ResourcePattern::AnyResource,
            ResourcePattern::AnyNormal,
            ResourcePattern::Cluster,
            ResourcePattern::Database("d".into()),
            ResourcePattern::CollectionName("c".into()),
            ResourcePattern::Namespace("d".into(), "c".into()),
            ResourcePattern::AnySystemBuckets,
        ] {
            assert_eq!(
                ResourcePattern::from_document(&pattern.to_document()),
                Ok(pattern)
            );
        }
        assert!(ResourcePattern::from_document(&doc! {"db": "x"}).is_err());
        assert!(ResourcePattern::from_document(&doc! {"cluster": false}).is_err());
    }
}
