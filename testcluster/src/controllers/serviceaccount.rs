//! The ServiceAccount controller: every active namespace has a ServiceAccount `default`.

use std::time::Duration;

use serde_json::json;

use super::{Reconciler, is_deleting, is_kind, name, namespace};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::store::{Event, Store};

fn namespaces_key() -> ResKey {
    ResKey::new("", "namespaces")
}

fn serviceaccounts_key() -> ResKey {
    ResKey::new("", "serviceaccounts")
}

/// Creates the `default` ServiceAccount of each namespace (again, if it is deleted).
pub(crate) struct ServiceAccountController;

impl Reconciler for ServiceAccountController {
    const NAME: &'static str = "serviceaccount";
    type Key = String;

    fn keys_for(&mut self, _store: &Store, ev: &Event, out: &mut Vec<String>) {
        if is_kind(&ev.key, "", "namespaces") {
            out.push(name(&ev.object).to_owned());
        } else if is_kind(&ev.key, "", "serviceaccounts") && name(&ev.object) == "default" {
            out.push(namespace(&ev.object).to_owned());
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<String>) {
        out.extend(
            store
                .list(&namespaces_key(), None)
                .0
                .iter()
                .map(|n| name(n).to_owned()),
        );
    }

    fn reconcile(&mut self, store: &Store, ns: &String) -> Result<Option<Duration>, ApiError> {
        let active = store
            .get(&namespaces_key(), "", ns)
            .is_some_and(|n| !is_deleting(&n));
        if !active {
            return Ok(None);
        }
        if store.get(&serviceaccounts_key(), ns, "default").is_some() {
            return Ok(None);
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
        match store.create(&serviceaccounts_key(), sa, false) {
            Ok(_) => Ok(None),
            // Created meanwhile, or the namespace began terminating: nothing to do.
            Err(e) if e.code == 409 || e.code == 403 => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::start;
    use crate::controllers::testutil::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_namespace_gets_a_default_service_account_back() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(
                &namespaces_key(),
                json!({"metadata": {"name": "team"}}),
                false,
            )
            .unwrap();
        wait_until(&store, 10, "default SAs", || {
            store
                .get(&serviceaccounts_key(), "team", "default")
                .is_some()
                && store
                    .get(&serviceaccounts_key(), "default", "default")
                    .is_some()
        })
        .await;
        store
            .delete(
                &serviceaccounts_key(),
                "team",
                "default",
                &Default::default(),
            )
            .unwrap();
        wait_until(&store, 10, "recreated", || {
            store
                .get(&serviceaccounts_key(), "team", "default")
                .is_some()
        })
        .await;
    }
}
