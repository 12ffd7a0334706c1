//! Capacity pack rendering (in progress).
