//! The command registry: every command of [`super::all`] by name and alias, built once, with the
//! per-command counters `serverStatus.metrics.commands` reports; the commands `listCommands`
//! shows.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use crate::command::CommandSpec;
use crate::state::ServerState;

/// Per-command counters for `serverStatus.metrics.commands`.
#[derive(Debug, Default)]
pub(crate) struct CommandCounters {
    pub total: AtomicU64,
    pub failed: AtomicU64,
}

struct Registry {
    by_name: HashMap<&'static str, &'static CommandSpec>,
    counters: HashMap<&'static str, CommandCounters>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut by_name = HashMap::new();
        let mut counters = HashMap::new();
        for spec in super::all() {
            for name in std::iter::once(&spec.name).chain(spec.aliases) {
                let previous = by_name.insert(*name, spec);
                debug_assert!(previous.is_none(), "command {name} registered twice");
            }
            counters.insert(spec.name, CommandCounters::default());
        }
        Registry { by_name, counters }
    })
}

/// The commands this server answers, test-only ones included only when enabled.
pub fn visible_commands(state: &ServerState) -> Vec<&'static CommandSpec> {
    let enabled = state.params.test_commands_enabled();
    let mut specs: Vec<_> = super::all()
        .filter(|spec| enabled || !spec.test_only)
        .collect();
    specs.sort_by_key(|spec| spec.name);
    specs
}

/// Every registered command's counters, by canonical name.
pub(crate) fn command_counters() -> impl Iterator<Item = (&'static str, &'static CommandCounters)> {
    registry()
        .counters
        .iter()
        .map(|(name, counters)| (*name, counters))
}

/// The command registered as `name` (or an alias of it); a test-only one only while test
/// commands are enabled.
pub(crate) fn lookup(state: &ServerState, name: &str) -> Option<&'static CommandSpec> {
    registry()
        .by_name
        .get(name)
        .copied()
        .filter(|spec| !spec.test_only || state.params.test_commands_enabled())
}

/// The counters of the command registered as `name` (an alias counts for its command; a
/// canonical name costs one lookup).
pub(crate) fn counters_of(name: &str) -> Option<&'static CommandCounters> {
    let registry = registry();
    registry
        .counters
        .get(name)
        .or_else(|| registry.counters.get(registry.by_name.get(name)?.name))
}
