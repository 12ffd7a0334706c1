//! Just enough of Kubernetes' protobuf encoding to read what client-go's typed clients send
//! (they always encode built-in kinds as protobuf): the access reviews of `kubectl auth
//! can-i`, the Secrets and Namespaces of `helm install` (its release storage,
//! `--create-namespace`) and `kubectl create namespace`, and the DeleteOptions of a typed
//! delete (`helm uninstall`). Every other protobuf body is
//! refused with 415 and a message saying so; responses are JSON, which client-go decodes by
//! their Content-Type.

use serde_json::{Value, json};

/// Content type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// One field of a protobuf message: its number and, for length-delimited fields, the bytes.
struct Field<'a> {
    number: u64,
    bytes: Option<&'a [u8]>,
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn fields(buf: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(buf, &mut pos)?;
                out.push(Field {
                    number,
                    bytes: None,
                });
            }
            1 => pos += 8,
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let bytes = buf.get(pos..pos.checked_add(len)?)?;
                pos += len;
                out.push(Field {
                    number,
                    bytes: Some(bytes),
                });
            }
            5 => pos += 4,
            _ => return None,
        }
    }
    (pos == buf.len()).then_some(out)
}

fn string_fields(buf: &[u8], names: &[(u64, &str)]) -> Option<Value> {
    let mut obj = serde_json::Map::new();
    for f in fields(buf)? {
        if let (Some((_, name)), Some(b)) = (names.iter().find(|(n, _)| *n == f.number), f.bytes) {
            let s = String::from_utf8_lossy(b).into_owned();
            match obj.get_mut(*name) {
                // Repeated fields (SubjectAccessReviewSpec.groups) become lists.
                Some(Value::Array(a)) => a.push(Value::from(s)),
                _ if *name == "groups" => {
                    obj.insert((*name).to_owned(), json!([s]));
                }
                _ => {
                    obj.insert((*name).to_owned(), Value::from(s));
                }
            }
        }
    }
    Some(Value::Object(obj))
}

/// The UTF-8 text of a length-delimited field (lossy: Kubernetes strings are UTF-8).
fn text(bytes: &[u8]) -> Value {
    Value::from(String::from_utf8_lossy(bytes).into_owned())
}

/// A map entry (`message { key = 1; value = 2; }`): its key and value bytes.
fn entry(buf: &[u8]) -> Option<(String, &[u8])> {
    let mut key = String::new();
    let mut value: &[u8] = &[];
    for f in fields(buf)? {
        match (f.number, f.bytes) {
            (1, Some(b)) => key = String::from_utf8_lossy(b).into_owned(),
            (2, Some(b)) => value = b,
            _ => {}
        }
    }
    Some((key, value))
}

/// An ObjectMeta: the fields a client sets or sends back (name, generateName, namespace,
/// uid, resourceVersion, labels, annotations, finalizers); the server sets the rest.
fn object_meta(buf: &[u8]) -> Option<Value> {
    let mut meta = json!({});
    for f in fields(buf)? {
        let Some(b) = f.bytes else { continue };
        match f.number {
            1 => meta["name"] = text(b),
            2 => meta["generateName"] = text(b),
            3 => meta["namespace"] = text(b),
            5 => meta["uid"] = text(b),
            6 => meta["resourceVersion"] = text(b),
            11 | 12 => {
                let (k, v) = entry(b)?;
                let map = if f.number == 11 {
                    "labels"
                } else {
                    "annotations"
                };
                meta[map][k] = text(v);
            }
            14 => {
                let list = meta["finalizers"].as_array().cloned().unwrap_or_default();
                meta["finalizers"] = Value::Array([list, vec![text(b)]].concat());
            }
            _ => {}
        }
    }
    Some(meta)
}

/// Decodes a core/v1 Secret or Namespace from a protobuf body into its JSON form: its
/// metadata (see [`object_meta`]), a Secret's `type`, `data` (base64, as JSON carries
/// bytes) and `stringData`, a Namespace's `spec.finalizers`. `None` for any other kind or a
/// body that is not Kubernetes protobuf.
pub fn decode_object(body: &[u8]) -> Option<Value> {
    use base64::Engine as _;
    let envelope = fields(body.strip_prefix(MAGIC)?)?;
    let part = |n: u64| {
        envelope
            .iter()
            .find(|f| f.number == n)
            .and_then(|f| f.bytes)
    };
    let type_meta = string_fields(part(1)?, &[(1, "apiVersion"), (2, "kind")])?;
    let kind = type_meta["kind"].as_str()?.to_owned();
    if kind == "DeleteOptions" {
        // What a typed client's delete sends: the propagation policy and dry-run are read
        // (the grace period, a varint, is not).
        let mut options = json!({"apiVersion": type_meta["apiVersion"], "kind": kind});
        for f in fields(part(2)?)? {
            match (f.number, f.bytes) {
                (4, Some(b)) => options["propagationPolicy"] = text(b),
                (5, Some(b)) => options["dryRun"] = json!([text(b)]),
                _ => {}
            }
        }
        return Some(options);
    }
    if type_meta["apiVersion"] != "v1" || !matches!(kind.as_str(), "Secret" | "Namespace") {
        return None;
    }
    let mut obj = json!({"apiVersion": "v1", "kind": kind});
    for f in fields(part(2)?)? {
        let Some(b) = f.bytes else { continue };
        match (kind.as_str(), f.number) {
            (_, 1) => obj["metadata"] = object_meta(b)?,
            ("Secret", 2) => {
                let (k, v) = entry(b)?;
                obj["data"][k] = Value::from(base64::engine::general_purpose::STANDARD.encode(v));
            }
            ("Secret", 3) => obj["type"] = text(b),
            ("Secret", 4) => {
                let (k, v) = entry(b)?;
                obj["stringData"][k] = text(v);
            }
            ("Namespace", 2) => {
                let finalizers = fields(b)?
                    .into_iter()
                    .filter(|f| f.number == 1)
                    .filter_map(|f| f.bytes.map(text))
                    .collect::<Vec<_>>();
                obj["spec"]["finalizers"] = Value::Array(finalizers);
            }
            _ => {}
        }
    }
    Some(obj)
}

/// Decodes a (Self)SubjectAccessReview from a protobuf body into its JSON form.
pub fn decode_access_review(body: &[u8]) -> Option<Value> {
    let envelope = body.strip_prefix(MAGIC)?;
    // runtime.Unknown: typeMeta = 1, raw = 2.
    let raw = fields(envelope)?
        .into_iter()
        .find(|f| f.number == 2)?
        .bytes?;
    let spec_bytes = fields(raw)?
        .into_iter()
        .find(|f| f.number == 2)
        .and_then(|f| f.bytes);
    let mut spec = serde_json::Map::new();
    for f in spec_bytes.map(fields).unwrap_or(Some(Vec::new()))? {
        let Some(b) = f.bytes else { continue };
        match f.number {
            1 => {
                let ra = string_fields(
                    b,
                    &[
                        (1, "namespace"),
                        (2, "verb"),
                        (3, "group"),
                        (4, "version"),
                        (5, "resource"),
                        (6, "subresource"),
                        (7, "name"),
                    ],
                )?;
                spec.insert("resourceAttributes".into(), ra);
            }
            2 => {
                spec.insert(
                    "nonResourceAttributes".into(),
                    string_fields(b, &[(1, "path"), (2, "verb")])?,
                );
            }
            3 => {
                spec.insert(
                    "user".into(),
                    Value::from(String::from_utf8_lossy(b).into_owned()),
                );
            }
            4 => {
                let groups = spec.entry("groups").or_insert_with(|| json!([]));
                if let Some(a) = groups.as_array_mut() {
                    a.push(Value::from(String::from_utf8_lossy(b).into_owned()));
                }
            }
            _ => {}
        }
    }
    Some(json!({"spec": spec}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(number: u64, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![((number << 3) | 2) as u8, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn decodes_a_self_subject_access_review() {
        let mut ra = ld(1, b"ns");
        ra.extend(ld(2, b"create"));
        ra.extend(ld(5, b"configmaps"));
        let spec = ld(1, &ra);
        let raw = ld(2, &spec);
        let mut body = MAGIC.to_vec();
        body.extend(ld(1, &ld(2, b"SelfSubjectAccessReview")));
        body.extend(ld(2, &raw));
        let v = decode_access_review(&body).unwrap();
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "create");
        assert_eq!(v["spec"]["resourceAttributes"]["resource"], "configmaps");
        assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "ns");
    }

    #[test]
    fn decodes_a_secret_and_a_namespace() {
        let mut meta = ld(1, b"sh.helm.release.v1.goodput.v1");
        meta.extend(ld(3, b"goodput-system"));
        meta.extend(ld(11, &[ld(1, b"owner"), ld(2, b"helm")].concat()));
        meta.extend(ld(11, &[ld(1, b"status"), ld(2, b"deployed")].concat()));
        let mut secret = ld(1, &meta);
        secret.extend(ld(2, &[ld(1, b"release"), ld(2, b"\x00\x01z")].concat()));
        secret.extend(ld(3, b"helm.sh/release.v1"));
        let mut body = MAGIC.to_vec();
        body.extend(ld(1, &[ld(1, b"v1"), ld(2, b"Secret")].concat()));
        body.extend(ld(2, &secret));
        let v = decode_object(&body).unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["metadata"]["name"], "sh.helm.release.v1.goodput.v1");
        assert_eq!(v["metadata"]["namespace"], "goodput-system");
        assert_eq!(v["metadata"]["labels"]["owner"], "helm");
        assert_eq!(v["metadata"]["labels"]["status"], "deployed");
        assert_eq!(v["type"], "helm.sh/release.v1");
        assert_eq!(v["data"]["release"], "AAF6");

        let mut body = MAGIC.to_vec();
        body.extend(ld(1, &[ld(1, b"v1"), ld(2, b"Namespace")].concat()));
        body.extend(ld(2, &ld(1, &ld(1, b"goodput-system"))));
        let v = decode_object(&body).unwrap();
        assert_eq!(v["metadata"]["name"], "goodput-system");
        // Another kind is not read.
        let mut body = MAGIC.to_vec();
        body.extend(ld(1, &[ld(1, b"v1"), ld(2, b"ConfigMap")].concat()));
        body.extend(ld(2, &ld(1, &ld(1, b"x"))));
        assert!(decode_object(&body).is_none());
        // A typed delete's options.
        let mut body = MAGIC.to_vec();
        body.extend(ld(
            1,
            &[ld(1, b"meta.k8s.io/v1"), ld(2, b"DeleteOptions")].concat(),
        ));
        body.extend(ld(2, &ld(4, b"Background")));
        let v = decode_object(&body).unwrap();
        assert_eq!(v["propagationPolicy"], "Background");
    }

    #[test]
    fn refuses_what_is_not_protobuf() {
        assert!(decode_access_review(b"{}").is_none());
        assert!(decode_access_review(b"k8s\0\x12\xff").is_none());
    }
}
