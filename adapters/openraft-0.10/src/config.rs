//! The openraft configuration this adapter needs, checked: a `Config`
//! built here cannot leave leader restoration on by mistake.
//!
//! openraft 0.10 replicates entries a leader has not made durable yet. With
//! `enable_leader_restore` on (openraft's default), a leader restarted
//! after a power cut is restored in its old term and can write new entries
//! under log ids its followers already acknowledged: the key-value
//! service lost acknowledged writes so (docs/decisions.md). [`raft_config`]
//! turns it off where it was left unset, refuses it where it was set on,
//! and validates the rest.

use std::sync::Arc;

use openraft10::{Config, ConfigError};

/// Why [`raft_config`] refused a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigRefused {
    /// `enable_leader_restore: Some(true)`: unsafe with this adapter.
    #[error(
        "enable_leader_restore is on: with openraft 0.10 a leader restored in its old term \
         after a power cut can overwrite entries its followers acknowledged; leave it unset \
         (raft_config turns it off) or set it to Some(false)"
    )]
    LeaderRestore,
    /// openraft's own validation failed.
    #[error("invalid openraft configuration: {0}")]
    Invalid(#[from] ConfigError),
}

/// `config` as this adapter needs it: leader restoration off (set if
/// unset; refused if on), then openraft's validation.
///
/// # Errors
/// [`ConfigRefused::LeaderRestore`] for `enable_leader_restore:
/// Some(true)`; [`ConfigRefused::Invalid`] where openraft's validation
/// fails.
pub fn raft_config(mut config: Config) -> Result<Arc<Config>, ConfigRefused> {
    match config.enable_leader_restore {
        Some(true) => return Err(ConfigRefused::LeaderRestore),
        Some(false) | None => config.enable_leader_restore = Some(false),
    }
    Ok(Arc::new(config.validate()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariants: unset becomes off; on is refused with the reason; other
    /// settings pass through openraft's validation.
    #[test]
    fn leader_restore_is_turned_off_or_refused() {
        let c = raft_config(Config::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.enable_leader_restore, Some(false));
        let on = Config {
            enable_leader_restore: Some(true),
            ..Config::default()
        };
        let refused = raft_config(on)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains("enable_leader_restore is on"), "{refused}");
        let bad = Config {
            election_timeout_min: 500,
            election_timeout_max: 100,
            ..Config::default()
        };
        assert!(matches!(raft_config(bad), Err(ConfigRefused::Invalid(_))));
    }
}
