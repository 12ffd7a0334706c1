//! Bearer tokens: an admin identity for tests and people, and one token per ServiceAccount
//! (what a pod's kubeconfig carries), so requests are authorised as the real cluster would.

use std::collections::HashMap;
use std::sync::Mutex;

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn admin() -> Self {
        Self {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    pub fn service_account(ns: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
        }
    }

    pub fn is_admin(&self) -> bool {
        self.name == "system:admin" || self.groups.iter().any(|g| g == "system:masters")
    }
}

/// The token table.
pub struct Tokens {
    admin: String,
    by_token: Mutex<HashMap<String, Identity>>,
    by_account: Mutex<HashMap<(String, String), String>>,
}

impl Default for Tokens {
    fn default() -> Self {
        Self::new()
    }
}

impl Tokens {
    pub fn new() -> Self {
        let admin = random_token();
        let mut by_token = HashMap::new();
        by_token.insert(admin.clone(), Identity::admin());
        Self {
            admin,
            by_token: Mutex::new(by_token),
            by_account: Mutex::new(HashMap::new()),
        }
    }

    pub fn admin_token(&self) -> &str {
        &self.admin
    }

    /// The token of a ServiceAccount, made on first use (a pod may start before its
    /// account's token controller would have run; the request is still authorised only
    /// through RBAC).
    pub fn for_service_account(&self, ns: &str, name: &str) -> String {
        let mut accounts = self.by_account.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = accounts.get(&(ns.to_owned(), name.to_owned())) {
            return t.clone();
        }
        let token = random_token();
        accounts.insert((ns.to_owned(), name.to_owned()), token.clone());
        self.by_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.clone(), Identity::service_account(ns, name));
        token
    }

    /// The identity behind a bearer token.
    pub fn lookup(&self, token: &str) -> Option<Identity> {
        self.by_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
    }

    /// Forgets an account's token (its ServiceAccount was deleted).
    pub fn revoke(&self, ns: &str, name: &str) {
        let token = self
            .by_account
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(ns.to_owned(), name.to_owned()));
        if let Some(t) = token {
            self.by_token
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&t);
        }
    }
}

fn random_token() -> String {
    let b: [u8; 24] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}
