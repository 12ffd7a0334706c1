//! Apply mode: the workload's `/scale`, or the minimum of the autoscaler that manages it.

use super::*;

impl PlanRun<'_> {
    /// Apply mode: the workload's `/scale`, or the minimum of the autoscaler that manages
    /// it. Nothing is written when an autoscaler's maximum is below the proposal.
    pub(super) async fn apply(&mut self, target: &Workload, proposal: u32) -> Result<(), Blocked> {
        let r = &self.plan.spec.target_ref;
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let manager = self.autoscaler().await?;
        let via = match manager {
            Some(Autoscaler {
                via,
                max,
                current_min,
                api,
                name,
                field,
            }) => {
                if proposal > max {
                    let message = format!(
                        "{via} manages {} and its maximum ({max}) is below the proposal \
                         ({proposal}); nothing was written: raise its maximum",
                        r.printable()
                    );
                    return Err(Blocked {
                        condition: plan_cond::APPLIED,
                        reason: reason::AUTOSCALER_MAX_CONFLICT,
                        message,
                        retry: Retry::Resync,
                    });
                }
                if current_min != Some(proposal) {
                    api.patch(
                        &name,
                        &pp,
                        &Patch::Merge(json!({"spec": {field: proposal}})),
                    )
                    .await
                    .map_err(|e| self.scale_failed(&via, e))?;
                    self.applied(proposal, &via).await;
                }
                format!("{via}: its {field} holds the proposal")
            }
            None => {
                if target.replicas != proposal {
                    target
                        .api
                        .patch_scale(
                            &r.name,
                            &pp,
                            &Patch::Merge(json!({"spec": {"replicas": proposal}})),
                        )
                        .await
                        .map_err(|e| self.scale_failed("scale", e))?;
                    self.status.current_replicas = Some(proposal);
                    self.applied(proposal, "scale").await;
                }
                "the workload's /scale holds the proposal".to_owned()
            }
        };
        self.condition(
            plan_cond::APPLIED,
            Cond::True,
            reason::APPLIED,
            format!("{proposal} replicas: {via}"),
        );
        Ok(())
    }

    pub(super) async fn applied(&mut self, replicas: u32, via: &str) {
        self.status.applied = Some(AppliedScale {
            replicas,
            via: via.to_owned(),
            time: self.time(),
        });
        self.event(
            EventType::Normal,
            reason::APPLIED,
            &format!("Set {replicas} replicas through {via}"),
        )
        .await;
        self.ctx.metrics.plan_event("applied");
    }

    pub(super) fn scale_failed(&self, via: &str, e: kube::Error) -> Blocked {
        self.ctx.metrics.plan_event("apply_failed");
        Blocked {
            condition: plan_cond::APPLIED,
            reason: reason::SCALE_FAILED,
            message: format!("writing the replicas through {via} failed: {e}; retrying"),
            retry: Retry::Backoff,
        }
    }

    /// The HPA (autoscaling/v2) or KEDA ScaledObject that scales the workload, if any.
    pub(super) async fn autoscaler(&self) -> Result<Option<Autoscaler>, Blocked> {
        let r = &self.plan.spec.target_ref;
        let hpas: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let list = hpas
            .list(&ListParams::default())
            .await
            .map_err(|e| api_blocked("listing HorizontalPodAutoscalers", e))?;
        for hpa in list {
            let spec = &hpa.spec;
            let t = &spec.scale_target_ref;
            let same_group = t
                .api_version
                .as_deref()
                .is_none_or(|v| group_of(v) == r.group());
            if t.kind == r.kind && t.name == r.name && same_group {
                let api = Api::namespaced_with(
                    self.ctx.client.clone(),
                    &self.namespace,
                    &kube::api::ApiResource::erase::<HorizontalPodAutoscaler>(&()),
                );
                return Ok(Some(Autoscaler {
                    via: format!("hpa/{}", hpa.name_any()),
                    max: spec.max_replicas.max(0) as u32,
                    current_min: spec.min_replicas.map(|m| m.max(0) as u32),
                    api,
                    name: hpa.name_any(),
                    field: "minReplicas",
                }));
            }
        }
        // KEDA is optional: a cluster without its CRD has no ScaledObjects.
        let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
        let Ok((resource, _)) = kube::discovery::pinned_kind(&self.ctx.client, &gvk).await else {
            return Ok(None);
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| api_blocked("listing KEDA ScaledObjects", e))?;
        for so in list {
            let spec = so.data.get("spec").cloned().unwrap_or(Value::Null);
            let t = spec.get("scaleTargetRef").cloned().unwrap_or(Value::Null);
            let kind = t
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("Deployment");
            let group = t
                .get("apiVersion")
                .and_then(Value::as_str)
                .map_or("apps", group_of);
            if t.get("name").and_then(Value::as_str) == Some(r.name.as_str())
                && kind == r.kind
                && group == r.group()
            {
                let read = |field: &str, default: u64| {
                    spec.get(field).and_then(Value::as_u64).unwrap_or(default) as u32
                };
                return Ok(Some(Autoscaler {
                    via: format!("scaledobject/{}", so.name_any()),
                    max: read("maxReplicaCount", 100),
                    current_min: spec
                        .get("minReplicaCount")
                        .and_then(Value::as_u64)
                        .map(|m| m as u32),
                    api: api.clone(),
                    name: so.name_any(),
                    field: "minReplicaCount",
                }));
            }
        }
        Ok(None)
    }
}

/// An autoscaler that manages the workload.
pub(super) struct Autoscaler {
    /// `hpa/<name>` or `scaledobject/<name>`.
    via: String,
    max: u32,
    current_min: Option<u32>,
    api: Api<DynamicObject>,
    name: String,
    /// The field that holds its minimum.
    field: &'static str,
}

/// The group of an `apiVersion` (empty for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}
