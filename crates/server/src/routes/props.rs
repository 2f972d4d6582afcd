//! llama-server's server-description and template routes: `GET /props` (and `POST /props`,
//! switched off unless `--props`, as there), `POST /apply-template` (the chat template's rendering, without generating) and
//! `POST /chat/completions/input_tokens` (the rendered prompt's token count).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use oxibonsai_tokenizer::chat_template::ChatRequest;
use serde_json::{json, Value};

use super::{chat, native};
use super::{loaded, ModelRequest};
use crate::api::{self, Fields};
use crate::error::ApiError;
use crate::{AppState, Loaded};

/// The build, as llama-server's `build_info` names its own (`b<number>-<commit>`).
const BUILD_INFO: &str = concat!("b0-oxibonsai-", env!("CARGO_PKG_VERSION"));

/// The sampling a request gets when it sets none: the native endpoint's defaults.
fn default_settings(l: &Loaded, defaults: &api::RequestDefaults) -> Result<Value, ApiError> {
    let empty = json!({});
    native::read(l, &Fields::new(&empty)?, defaults).map(|n| n.generation_settings())
}

pub(super) async fn get_props(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let l = loaded(&state)?;
    let token_text = |id: Option<u32>| {
        id.and_then(|id| l.tokenizer.token_to_piece(id, true).ok())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let o = &state.options;
    Ok(Json(json!({
        "default_generation_settings": {
            "params": default_settings(l, &o.request_defaults)?,
            "n_ctx": l.n_ctx,
        },
        "total_slots": o.parallel.max(1),
        "model_alias": state.model_id,
        "model_path": o.model_path.display().to_string(),
        "modalities": {"vision": false, "video": false, "audio": false},
        "endpoint_slots": o.slots_endpoint,
        "endpoint_props": o.props_endpoint,
        "endpoint_metrics": true,
        "ui": true,
        "chat_template": l.template.as_ref().map_or("", |t| t.source()),
        "chat_template_caps": {},
        "bos_token": token_text(l.tokenizer.bos()),
        "eos_token": token_text(l.tokenizer.eos()),
        "build_info": BUILD_INFO,
        "is_sleeping": state.sleep.is_sleeping(),
        "device": state.device.get(),
    }))
    .into_response())
}

/// llama-server changes no property here either; it only answers whether it may.
pub(super) async fn post_props(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    if !state.options.props_endpoint {
        return Err(ApiError::NotSupported(
            "This server does not support changing global properties. Start it with `--props`"
                .to_owned(),
        ));
    }
    Ok(Json(json!({"success": true})).into_response())
}

/// The messages through the chat template, as the chat route renders them.
fn rendered(l: &Loaded, f: &Fields<'_>) -> Result<String, ApiError> {
    let template = l
        .template
        .as_ref()
        .ok_or_else(|| ApiError::invalid("messages", "this model has no chat template"))?;
    let request = ChatRequest {
        messages: api::messages(f)?,
        tools: None,
        add_generation_prompt: f.bool("add_generation_prompt")?.unwrap_or(true),
        extra_kwargs: match f.get("chat_template_kwargs") {
            None => Default::default(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Err(ApiError::invalid(
                    "chat_template_kwargs",
                    "'chat_template_kwargs' must be an object",
                ))
            }
        },
    };
    let mut request = request;
    chat::llama_server_kwargs(l, &mut request.extra_kwargs);
    let mut text = template
        .render(&request, &l.tokenizer.template_specials())
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    if request.add_generation_prompt {
        chat::close_open_think(l, &mut text);
    }
    Ok(text)
}

pub(super) async fn apply_template(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    Ok(Json(json!({"prompt": rendered(l, &f)?})).into_response())
}

pub(super) async fn input_tokens(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    let text = rendered(l, &f)?;
    let tokens = l
        .tokenizer
        .encode(&text, true, true)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    Ok(Json(json!({"input_tokens": tokens.len()})).into_response())
}
