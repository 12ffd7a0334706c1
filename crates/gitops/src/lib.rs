//! Propose mode through Git: a replica change as a pull request.
//!
//! - `edit`: the one replica number changed in a YAML file, every other byte kept.
//! - `git`: the `git` command line as a subprocess (shallow clone, commit, push with a lease).
//! - `forge`: pull requests on GitHub and merge requests on GitLab behind one small trait.

pub mod edit;
pub mod forge;
pub mod git;
