//! The test cluster's conformance suite: every behaviour through the real `kube::Client`
//! (and kube-runtime's watcher, reflector and Controller) or the real `kubectl`.

mod api;
mod faults;
mod kubectl;
mod operator;
mod support;
mod workloads;
