//! The prefix cache's state a run measures: cold or warm, never averaged together.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A cache state.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum CacheMode {
    /// Unique prompts: the prefix cache has nothing to reuse.
    Cold,
    /// A pinned pool of shared prefixes, prewarmed before each point.
    Warm,
}

impl CacheMode {
    /// `cold` / `warm`: the name in labels, folders and Job names.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Cold => "cold",
            CacheMode::Warm => "warm",
        }
    }
}

impl std::fmt::Display for CacheMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CacheMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cold" => Ok(CacheMode::Cold),
            "warm" => Ok(CacheMode::Warm),
            _ => Err(format!("`{s}` is not a cache mode: cold or warm")),
        }
    }
}
