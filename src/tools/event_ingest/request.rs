//! A validated `event_ingest` call, and the record its first claim writes.

use super::super::settings::MAX_LEASE_SECONDS;
use super::super::{params, Params, Settings};
use crate::error::ToolError;
use event_store::key::validate_event_id;
use event_store::record::{check_depth, fingerprint_and_kind, format_time, DoorClaim, Record, Status};

pub(super) const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// Longest accepted `run_id` (Dify's workflow run ids are 36-character UUIDs).
const MAX_RUN_ID_BYTES: usize = 255;

/// A validated ingest call; nothing touches the store before this exists.
#[derive(Clone)]
pub struct IngestRequest {
    pub event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub fingerprint: String,
    /// `json`, `text` or `none`: how the payload was compared.
    pub compared_as: &'static str,
    /// The effective lease: this call's `lease_seconds`, else the provider default; None = never.
    pub lease_ms: Option<i64>,
    /// The workflow run calling (`{{#sys.workflow_run_id#}}`): its claim says so, and the same
    /// run calling again (a node retry) finds its own claim instead of a duplicate.
    pub run_id: Option<String>,
    /// Claimed at the trigger's door: a reservation until a workflow run takes it, its lease
    /// (`lease_ms`) the start window.
    pub at_door: bool,
}

impl IngestRequest {
    /// What the trigger's door claims: no payload (only the id and the type are compared on a
    /// redelivery), held for `start_window_ms` until a workflow run takes it.
    pub fn at_door(event_id: String, event_type: String, start_window_ms: i64) -> IngestRequest {
        let (fingerprint, compared_as) = fingerprint_and_kind(&event_type, None);
        IngestRequest {
            event_id,
            event_type,
            payload: None,
            fingerprint,
            compared_as,
            lease_ms: Some(start_window_ms),
            run_id: None,
            at_door: true,
        }
    }

    /// The record a first claim of this event writes at store time `now`, with `claim_id`:
    /// the request's own strings move into it (the payload is most of a record), and it
    /// stands for the request from then on.
    pub fn first_claim(self, now: i64, claim_id: String) -> Record {
        let received_at = format_time(now);
        Record {
            v: 1,
            event_id: self.event_id,
            event_type: self.event_type,
            payload: self.payload,
            fingerprint: self.fingerprint,
            status: Status::Processing,
            updated_at: received_at.clone(),
            received_at,
            attempt: 1,
            lease_until_ms: self.lease_ms.map(|l| now + l),
            completed_at: None,
            result: None,
            claim_id,
            run_id: self.run_id,
            door: self.at_door.then(DoorClaim::default),
        }
    }

    pub fn parse(p: &Params<'_>, settings: &Settings) -> Result<IngestRequest, ToolError> {
        let event_id = params::required_str(p, "event_id")?;
        validate_event_id(&event_id)?;
        let event_type = params::required_str(p, "event_type")?;
        if !settings.event_types.contains(&event_type) {
            return Err(ToolError::param(format!(
                "event_type {event_type:?} is not one of the configured types: {}",
                settings.event_types.join(", ")
            )));
        }
        let payload = params::optional_payload(p, "payload")?;
        if let Some(body) = &payload {
            if body.len() > MAX_PAYLOAD_BYTES {
                return Err(ToolError::param(format!(
                    "payload is {} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes (256 KiB)",
                    body.len()
                )));
            }
        }
        let lease = params::optional_int(p, "lease_seconds", 0, MAX_LEASE_SECONDS as i64)?
            .unwrap_or(settings.default_lease.as_secs() as i64);
        let run_id = params::optional_str(p, "run_id")?.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
        if let Some(r) = &run_id {
            if r.len() > MAX_RUN_ID_BYTES || r.chars().any(char::is_control) {
                return Err(ToolError::param(format!(
                    "run_id must be printable text of at most {MAX_RUN_ID_BYTES} bytes; pass {{{{#sys.workflow_run_id#}}}}"
                )));
            }
        }
        let (fingerprint, compared_as) = fingerprint_and_kind(&event_type, payload.as_deref());
        if compared_as == "text" {
            check_depth(payload.as_deref().unwrap_or_default()).map_err(ToolError::param)?;
        }
        Ok(IngestRequest {
            event_id,
            event_type,
            payload,
            fingerprint,
            compared_as,
            lease_ms: (lease > 0).then_some(lease * 1000),
            run_id,
            at_door: false,
        })
    }
}
