//! The trigger adapter driven as the daemon drives it: routing, the wire shapes of its answers, its refusals.

use serde_json::{json, Value};

use super::*;
use crate::provider::drive::answer;

/// Starts `hook` when the `X-Token` header matches the subscription's `token`; its invoke
/// gives the body's members, and cancels when the workflow's `skip` parameter says so.
struct Hook;

impl Trigger for Hook {
    async fn dispatch(&self, delivery: &Delivery) -> Result<Dispatch, ErrorMessage> {
        let token = delivery.subscription.properties.get("token").and_then(Value::as_str);
        if token.is_none() || delivery.request.header("x-token") != token {
            return Ok(Dispatch::new(Vec::<String>::new(), HttpResponse::new(401)));
        }
        let mut dispatch = Dispatch::new(["hook"], HttpResponse::new(200).with_body("text/plain", "ok"));
        dispatch.payload.insert("path".into(), delivery.request.path.clone().into());
        Ok(dispatch)
    }

    async fn invoke(&self, event: &Event) -> Result<Variables, ErrorMessage> {
        if event.parameters.get("skip") == Some(&json!(true)) {
            return Ok(Variables::cancelled());
        }
        let mut variables: Map<String, Value> = event
            .delivery
            .request
            .json()
            .map_err(|e| ErrorMessage::new("TriggerDispatchError", format!("not JSON: {e}")))?;
        variables.insert("event".into(), event.name.clone().into());
        variables.insert("path".into(), event.payload["path"].clone());
        Ok(Variables::new(variables))
    }
}

fn raw(headers: &str, body: &str) -> String {
    let request = format!("POST /triggers/plugin/e1 HTTP/1.1\r\n{headers}\r\n\r\n{body}");
    request.bytes().map(|b| format!("{b:02x}")).collect()
}

fn request(action: &str, raw_http_request: &str) -> Value {
    json!({"type": "trigger", "action": action, "provider": "p", "user_id": "", "credentials": {},
           "raw_http_request": raw_http_request, "subscription": {"endpoint": "https://x/e1", "properties": {"token": "t"}}})
}

fn end() -> Value {
    json!({"type": "end", "data": {}})
}

#[tokio::test]
async fn a_dispatch_lists_its_events_and_the_senders_response_in_hex() {
    let out = answer(TriggerProvider::new(Hook), request("dispatch_trigger_event", &raw("X-Token: t", "{}"))).await;
    let response = HttpResponse::new(200).with_body("text/plain", "ok").to_hex();
    let chunk =
        json!({"user_id": "", "events": ["hook"], "response": response, "payload": {"path": "/triggers/plugin/e1"}});
    assert_eq!(out, [json!({"type": "stream", "data": chunk}), end()]);
}

#[tokio::test]
async fn a_dispatch_that_starts_nothing_still_sends_an_empty_list() {
    let out = answer(TriggerProvider::new(Hook), request("dispatch_trigger_event", &raw("X-Token: no", ""))).await;
    assert_eq!(out[0]["data"]["events"], json!([]));
    assert_eq!(out[0]["data"]["payload"], json!({}));
}

#[tokio::test]
async fn an_invoke_gives_the_workflow_its_variables_or_cancels() {
    let mut data = request("invoke_trigger_event", &raw("X-Token: t", r#"{"a": 1}"#));
    data["event"] = "hook".into();
    data["payload"] = json!({"path": "/p"});
    let out = answer(TriggerProvider::new(Hook), data.clone()).await;
    let variables = json!({"variables": {"a": 1, "event": "hook", "path": "/p"}, "cancelled": false});
    assert_eq!(out, [json!({"type": "stream", "data": variables}), end()]);

    data["parameters"] = json!({"skip": true});
    let out = answer(TriggerProvider::new(Hook), data).await;
    assert_eq!(out[0]["data"], json!({"variables": {}, "cancelled": true}));
}

#[tokio::test]
async fn a_triggers_error_ends_the_session() {
    let mut data = request("invoke_trigger_event", &raw("X-Token: t", "not json"));
    data["event"] = "hook".into();
    let out = answer(TriggerProvider::new(Hook), data).await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0]["data"]["error_type"], "TriggerDispatchError");
    assert_eq!(out[1], end());
}

#[tokio::test]
async fn a_request_that_is_not_hex_is_refused_without_reaching_the_trigger() {
    for raw_http_request in ["zz", "", "474554"] {
        let out = answer(TriggerProvider::new(Hook), request("dispatch_trigger_event", raw_http_request)).await;
        let error = json!({"error_type": "ValueError", "message": "raw_http_request is not a hex-encoded HTTP request", "args": {}});
        assert_eq!(out, [json!({"type": "error", "data": error}), end()], "{raw_http_request:?}");
    }
}

struct Token;

impl ValidateCredentials for Token {
    async fn validate_credentials(&self, credentials: &Credentials) -> Result<(), ErrorMessage> {
        match credentials.get("token") {
            Some(_) => Ok(()),
            None => Err(ErrorMessage::new("TriggerProviderCredentialValidationError", "no token")),
        }
    }
}

#[tokio::test]
async fn credentials_go_to_the_providers_check() {
    let validate = |credentials: Value| json!({"type": "trigger", "action": "validate_trigger_credentials", "credentials": credentials});
    let with = || TriggerProvider::new(Hook).with_credentials(Token);
    assert_eq!(
        answer(with(), validate(json!({"token": "t"}))).await,
        [json!({"type": "stream", "data": {"result": true}}), end()]
    );
    assert_eq!(answer(with(), validate(json!({}))).await[0]["data"]["message"], "no token");
    let without = answer(TriggerProvider::new(Hook), validate(json!({"token": "t"}))).await;
    assert_eq!(without[0]["type"], "error", "a provider without credentials accepts none: {without:?}");
}

#[tokio::test]
async fn an_action_without_a_route_ends_empty() {
    let data = json!({"type": "trigger", "action": "subscribe_trigger", "endpoint": "https://x/e1"});
    assert_eq!(answer(TriggerProvider::new(Hook), data).await, [end()]);
}
