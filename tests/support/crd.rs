//! goodput's CRDs on a test cluster: created from their YAML and waited for until the API
//! server serves them.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// Creates the CRD `yaml` holds and waits (30 s at most) until it is established.
pub async fn install_crd(client: &kube::Client, yaml: &str) {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(yaml).expect("the CRD parses");
    let name = crd.metadata.name.clone().expect("a CRD has a name");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("the API server accepts the CRD");
    let established = kube::runtime::wait::await_condition(
        crds,
        &name,
        kube::runtime::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .expect("the CRD is established in time")
        .expect("watching the CRD");
}
