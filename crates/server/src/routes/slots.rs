//! llama-server's `/slots` routes: `GET /slots` (each slot's state; 501 with `--no-slots`) and
//! `POST /slots/{id}?action=save|restore|erase` — a slot's sequence (tokens and cache) written
//! to or read from a file in `--slot-save-path`, or emptied. The engine thread does the work
//! between steps, on the slot once it is idle ([`crate::scheduler::SlotCommand`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::loaded;
use crate::error::ApiError;
use crate::scheduler::{SlotAction, SlotAnswer, SlotCommand, SlotError, Work};
use crate::AppState;

/// The longest slot file name.
const MAX_FILENAME: usize = 255;

/// Sends `action` to the engine and waits for its answer.
async fn ask(state: &AppState, slot: usize, action: SlotAction) -> Result<SlotAnswer, ApiError> {
    let l = loaded(state)?;
    let (reply, answer) = oneshot::channel();
    l.jobs
        .lock()
        .map_err(|_| ApiError::internal("the engine is gone"))?
        .send(Work::Slot(SlotCommand {
            slot,
            action,
            reply,
        }))
        .map_err(|_| ApiError::internal("the engine thread has stopped"))?;
    match answer.await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(SlotError::BadRequest(message))) => Err(ApiError::invalid("filename", message)),
        Ok(Err(SlotError::Server(message))) => Err(ApiError::internal(message)),
        Err(_) => Err(ApiError::ShuttingDown),
    }
}

pub(super) async fn get_slots(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    if !state.options.slots_endpoint {
        return Err(ApiError::NotSupported(
            "This server does not support slots endpoint. Start it with `--slots`".to_owned(),
        ));
    }
    let SlotAnswer::List(list) = ask(&state, 0, SlotAction::List).await? else {
        return Err(ApiError::internal("the engine answered another command"));
    };
    let speculative = state.options.draft.is_some();
    let list: Vec<Value> = list
        .into_iter()
        .map(|s| {
            json!({
                "id": s.id,
                "n_ctx": s.n_ctx,
                "speculative": speculative,
                "is_processing": s.is_processing,
                "n_past": s.n_past,
            })
        })
        .collect();
    Ok(Json(list).into_response())
}

/// A slot file's name: a plain name inside the save folder, nothing that reaches out of it.
fn safe_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FILENAME
        && !name.starts_with('.')
        && !name.contains("..")
        && !name
            .chars()
            .any(|c| matches!(c, '/' | '\\' | ':') || c.is_control())
}

pub(super) async fn post_slot(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(dir) = state.options.slot_save_path.clone() else {
        return Err(ApiError::NotSupported(
            "This server does not support slots action. Start it with `--slot-save-path`"
                .to_owned(),
        ));
    };
    let slots = state.options.parallel.max(1);
    let slot = id
        .parse::<usize>()
        .ok()
        .filter(|&s| s < slots)
        .ok_or_else(|| {
            ApiError::invalid(
                "id_slot",
                format!("Invalid slot ID '{id}' (0 to {})", slots - 1),
            )
        })?;
    let action = query.get("action").map(String::as_str).unwrap_or_default();
    if action == "erase" {
        let SlotAnswer::Erased { tokens } = ask(&state, slot, SlotAction::Erase).await? else {
            return Err(ApiError::internal("the engine answered another command"));
        };
        return Ok(Json(json!({"id_slot": slot, "n_erased": tokens})).into_response());
    }
    if action != "save" && action != "restore" {
        return Err(ApiError::invalid(
            "action",
            format!("Invalid action '{action}': save, restore or erase"),
        ));
    }
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::invalid("body", format!("the request body is not valid JSON: {e}"))
        })?
    };
    let filename = body
        .get("filename")
        .and_then(Value::as_str)
        .filter(|name| safe_filename(name))
        .ok_or_else(|| {
            ApiError::invalid(
                "filename",
                "Invalid filename: a plain file name, without path separators or '..'",
            )
        })?;
    let path = dir.join(filename);
    let answer = if action == "save" {
        ask(&state, slot, SlotAction::Save(path)).await?
    } else {
        ask(&state, slot, SlotAction::Restore(path)).await?
    };
    let body = match answer {
        SlotAnswer::Saved { tokens, bytes, ms } => json!({
            "id_slot": slot, "filename": filename, "n_saved": tokens, "n_written": bytes,
            "timings": {"save_ms": ms},
        }),
        SlotAnswer::Restored { tokens, bytes, ms } => json!({
            "id_slot": slot, "filename": filename, "n_restored": tokens, "n_read": bytes,
            "timings": {"restore_ms": ms},
        }),
        _ => return Err(ApiError::internal("the engine answered another command")),
    };
    Ok(Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::safe_filename;

    #[test]
    fn only_plain_names_are_slot_files() {
        for ok in ["slot1.bin", "a", "my slot-2_x.state"] {
            assert!(safe_filename(ok), "{ok}");
        }
        let long = "a".repeat(256);
        for bad in [
            "",
            "../x",
            "..",
            ".",
            ".hidden",
            "a/b",
            "a\\b",
            "/etc/passwd",
            "c:x",
            "a\nb",
            "x..y",
            long.as_str(),
        ] {
            assert!(!safe_filename(bad), "{bad:?}");
        }
    }
}
