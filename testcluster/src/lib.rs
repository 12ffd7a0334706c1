//! A Kubernetes test cluster on loopback: an API-server double over HTTPS that the real
//! `kube::Client`, `kubectl` and `helm` talk to, controllers for the built-in workloads, a
//! kubelet that runs pods as local processes and a proxy that gives Services a loopback IP.

pub mod admission;
pub mod auth;
pub mod cluster;
pub mod controllers;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod kubelet;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod proxy;
pub mod rbac;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod ssa;
pub mod store;
pub mod table;
pub mod time;
pub mod tls;
