//! The project's two non-cryptographic hash functions, used wherever a value must be the
//! same on every machine: SplitMix64's finaliser (seeds, prompt tokens, per-request draws)
//! and FNV-1a (prefix-cache block keys, schedule fingerprints).

/// SplitMix64's increment (2^64 / φ), also used to spread a second input before mixing.
pub const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a bijective, well-mixed 64-bit hash of `z`.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One SplitMix64 output for state `z` (the state advanced by [`GOLDEN_GAMMA`], then mixed).
pub fn splitmix64(z: u64) -> u64 {
    mix64(z.wrapping_add(GOLDEN_GAMMA))
}

/// A deterministic uniform draw in `[0, 1)` from `(seed, key, salt)`: the top 53 bits of
/// a SplitMix64 chain (per-request fault and cancellation draws).
pub fn unit(seed: u64, key: u64, salt: u64) -> f64 {
    (splitmix64(seed ^ splitmix64(key ^ splitmix64(salt))) >> 11) as f64 / (1u64 << 53) as f64
}

/// FNV-1a's starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`, continuing from `h` (start with [`FNV_OFFSET`]).
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // SplitMix64 from state 0 (the reference implementation's first output).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        // FNV-1a of "a".
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xAF63_DC4C_8601_EC8C);
    }
}
