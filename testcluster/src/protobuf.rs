//! Just enough of Kubernetes' protobuf encoding to read the access reviews `kubectl auth
//! can-i` sends (its typed client always encodes built-in kinds as protobuf). Every other
//! protobuf body is refused with 415 and a message saying so; responses are JSON, which
//! client-go decodes by their Content-Type.

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
    fn refuses_what_is_not_protobuf() {
        assert!(decode_access_review(b"{}").is_none());
        assert!(decode_access_review(b"k8s\0\x12\xff").is_none());
    }
}
