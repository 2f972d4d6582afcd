//! Every request body is read whole before anything answers the request.
//!
//! An HTTP/1.1 server that answers while the client is still sending (a 413 decided from
//! `Content-Length`, a 401 decided from the headers) cannot use the connection again: the rest
//! of the body is still on its way. hyper then closes the connection after the answer, without
//! saying so in the answer, and a client that pools connections sends its next request on a
//! connection that is about to close — it sees "server disconnected without sending a
//! response". Reading the body first keeps the connection usable for every answer. A body past
//! the limit is read on and dropped (never stored), up to [`DRAIN_BYTES`] more within
//! [`DRAIN_TIME`]; past either the answer says `Connection: close`.
//!
//! A client may not hold a connection by sending its body slowly: each piece must follow the last
//! within the server's header timeout, and the whole within [`BODY_TIME_FACTOR`] of it (408).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use crate::error::ApiError;

/// How much of an oversized body is read and dropped so that the connection stays usable.
pub(crate) const DRAIN_BYTES: usize = 64 << 20;
/// How long reading an oversized body may take before the connection is closed instead.
pub(crate) const DRAIN_TIME: Duration = Duration::from_secs(10);
/// The whole body must arrive within this many header timeouts.
const BODY_TIME_FACTOR: u32 = 6;

/// The request with its body read (at most `limit` bytes, each piece within `gap`), or the
/// answer: 413 past the limit, 400 for a body that breaks off, 408 for one too slow.
pub(super) async fn read_whole(
    req: Request,
    limit: usize,
    gap: Duration,
) -> Result<Request, Response> {
    let whole = gap * BODY_TIME_FACTOR;
    match tokio::time::timeout(whole, read_within(req, limit, gap)).await {
        Ok(read) => read,
        Err(_) => Err(ApiError::BodyTimeout.into_response()),
    }
}

async fn read_within(req: Request, limit: usize, gap: Duration) -> Result<Request, Response> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|n| n > limit as u64) {
        // Known too large: nothing is kept, and a body larger than the drain allowance is not
        // read at all.
        let drainable = declared.is_some_and(|n| n <= (limit + DRAIN_BYTES) as u64);
        return Err(too_large(drainable && drain(&mut stream, 0).await));
    }
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    loop {
        let next = tokio::time::timeout(gap, stream.next())
            .await
            .map_err(|_| ApiError::BodyTimeout.into_response())?;
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(broken)?;
        if buf.len() + chunk.len() > limit {
            let seen = buf.len() + chunk.len();
            drop(buf);
            return Err(too_large(drain(&mut stream, seen - limit).await));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Request::from_parts(parts, Body::from(Bytes::from(buf))))
}

/// Reads the rest of a body and drops it; true if it ended within the allowance (the
/// connection can carry the next request).
async fn drain(stream: &mut axum::body::BodyDataStream, mut over: usize) -> bool {
    let read = async {
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    over += chunk.len();
                    if over > DRAIN_BYTES {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, read)
        .await
        .unwrap_or(false)
}

fn too_large(reusable: bool) -> Response {
    let response = ApiError::TooLarge.into_response();
    if reusable {
        response
    } else {
        closing(response)
    }
}

fn broken(err: axum::Error) -> Response {
    closing(
        ApiError::invalid("body", format!("the request body could not be read: {err}"))
            .into_response(),
    )
}

/// The answer, telling the client that the connection ends with it.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
