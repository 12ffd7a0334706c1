//! GitHub App credentials: the App's RS256 JWT (signed with `ring`) and the installation
//! token it buys, cached until 5 minutes before it expires.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};

use super::ForgeError;

/// GitHub allows at most 10 minutes; 9 leaves room for clock skew on the far side.
const JWT_LIFETIME: Duration = Duration::from_secs(540);
/// Backdated for the same reason, as GitHub recommends.
const JWT_BACKDATE: Duration = Duration::from_secs(60);
/// An installation token is renewed this long before its `expires_at`.
pub(super) const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);
/// Assumed when `expires_at` does not parse (GitHub's tokens live an hour).
pub(super) const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// A GitHub App's identity and the state of its installation token.
pub(super) struct AppAuth {
    app_id: String,
    key: RsaKeyPair,
    pub(super) state: tokio::sync::Mutex<AppState>,
}

/// Guarded by one lock so that concurrent callers fetch one token, not one each.
pub(super) struct AppState {
    pub(super) installation_id: Option<u64>,
    pub(super) token: Option<InstallationToken>,
}

pub(super) struct InstallationToken {
    pub(super) value: String,
    pub(super) refresh_at: SystemTime,
}

impl InstallationToken {
    /// A token that expires at `expires_at` (GitHub's RFC 3339 text) and is renewed
    /// [`REFRESH_BEFORE_EXPIRY`] earlier.
    pub(super) fn new(value: String, expires_at: &str, now: SystemTime) -> Self {
        let expires = parse_rfc3339(expires_at).unwrap_or(now + DEFAULT_TOKEN_LIFETIME);
        let refresh_at = expires.checked_sub(REFRESH_BEFORE_EXPIRY).unwrap_or(now);
        Self { value, refresh_at }
    }

    pub(super) fn fresh(&self, now: SystemTime) -> bool {
        now < self.refresh_at
    }
}

impl AppAuth {
    pub(super) fn new(
        app_id: String,
        installation_id: Option<u64>,
        private_key_pem: &str,
    ) -> Result<Self, ForgeError> {
        if app_id.trim().is_empty() {
            return Err(ForgeError::Config("the GitHub App id is empty".into()));
        }
        Ok(Self {
            app_id: app_id.trim().to_owned(),
            key: parse_private_key(private_key_pem)?,
            state: tokio::sync::Mutex::new(AppState {
                installation_id,
                token: None,
            }),
        })
    }

    /// The App's JWT: `iat = now - 60 s`, `exp = now + 540 s`, `iss` = the App id (a number
    /// when it is one, else the client id string).
    pub(super) fn jwt(&self, now: SystemTime) -> Result<String, ForgeError> {
        let now = now
            .duration_since(UNIX_EPOCH)
            .map_err(|_| ForgeError::Config("the system clock is before 1970".into()))?;
        let iss = match self.app_id.parse::<u64>() {
            Ok(id) => serde_json::Value::from(id),
            Err(_) => serde_json::Value::from(self.app_id.as_str()),
        };
        let claims = serde_json::json!({
            "iat": now.saturating_sub(JWT_BACKDATE).as_secs(),
            "exp": (now + JWT_LIFETIME).as_secs(),
            "iss": iss,
        });
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let signing_input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| ForgeError::Config("signing the GitHub App JWT failed".into()))?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }
}

/// An RSA key from PEM: PKCS#1 (`RSA PRIVATE KEY`, what GitHub hands out) or PKCS#8
/// (`PRIVATE KEY`). A PEM pasted with literal `\n`s (an environment variable) is accepted.
fn parse_private_key(pem: &str) -> Result<RsaKeyPair, ForgeError> {
    let pem = if pem.contains('\n') {
        pem.to_owned()
    } else {
        pem.replace("\\n", "\n")
    };
    let (label, der) = pem_block(&pem)?;
    let parsed = match label.as_str() {
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
        other => {
            return Err(ForgeError::Config(format!(
                "the GitHub App key is a {other:?} PEM block; expected an RSA private key"
            )));
        }
    };
    parsed.map_err(|e| ForgeError::Config(format!("the GitHub App key is not usable: {e}")))
}

/// The first PEM block's label and bytes.
fn pem_block(pem: &str) -> Result<(String, Vec<u8>), ForgeError> {
    let bad = |why: &str| ForgeError::Config(format!("the GitHub App key is not PEM: {why}"));
    let mut lines = pem.lines().map(str::trim);
    let label = lines
        .by_ref()
        .find_map(|l| l.strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
        .ok_or_else(|| bad("no BEGIN line"))?
        .to_owned();
    let end = format!("-----END {label}-----");
    let mut body = String::new();
    for line in lines.by_ref() {
        if line == end {
            let der = STANDARD
                .decode(body.as_bytes())
                .map_err(|_| bad("the body is not base64"))?;
            return Ok((label, der));
        }
        if line.contains(':') {
            return Err(bad("encrypted keys are not supported"));
        }
        body.push_str(line);
    }
    Err(bad("no END line"))
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, the form GitHub uses for `expires_at`.
pub(super) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let separators = text.as_bytes();
    if separators.get(4) != Some(&b'-')
        || separators.get(7) != Some(&b'-')
        || !matches!(separators.get(10), Some(b'T' | b't' | b' '))
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        rest = fraction.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = rest.get(1..)?.split_once(':')?;
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse() {
        let at = |s| parse_rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs());
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(at("2016-07-11T22:14:10Z"), Some(1_468_275_250));
        assert_eq!(at("2016-07-11T22:14:10.123Z"), Some(1_468_275_250));
        assert_eq!(at("2016-07-12T00:14:10+02:00"), Some(1_468_275_250));
        assert_eq!(at("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(at("2016-07-11"), None);
        assert_eq!(at("2016-13-11T22:14:10Z"), None);
        assert_eq!(at("2016-07-11T22:14:10"), None);
    }

    #[test]
    fn tokens_refresh_five_minutes_early() {
        let now = UNIX_EPOCH + Duration::from_secs(1_468_270_000);
        let token = InstallationToken::new("t".into(), "2016-07-11T22:14:10Z", now);
        assert!(token.fresh(now));
        let almost = UNIX_EPOCH + Duration::from_secs(1_468_275_250 - 299);
        assert!(!token.fresh(almost));
        // Unparseable: an hour from now.
        let guessed = InstallationToken::new("t".into(), "soon", now);
        assert!(guessed.fresh(now + Duration::from_secs(3000)));
        assert!(!guessed.fresh(now + Duration::from_secs(3400)));
    }

    #[test]
    fn keys_that_are_not_rsa_pem_are_config_errors() {
        let cases = [
            "",
            "-----BEGIN RSA PRIVATE KEY-----\nnot base64!\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\nAAAA",
        ];
        for pem in cases {
            let error = AppAuth::new("1".into(), None, pem).err();
            assert!(
                matches!(error, Some(ForgeError::Config(_))),
                "{pem:?}: {error:?}"
            );
        }
    }

    #[test]
    fn pem_blocks_decode() {
        let pem = "junk\n-----BEGIN PRIVATE KEY-----\nAAEC\nAw==\n-----END PRIVATE KEY-----\n";
        let (label, der) = pem_block(pem).unwrap();
        assert_eq!(label, "PRIVATE KEY");
        assert_eq!(der, [0, 1, 2, 3]);
    }
}
