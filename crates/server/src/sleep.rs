//! `serve --sleep-idle-seconds N` (llama-server's flag): after N seconds without a request that
//! needs the model, the engine thread drops the model's weights and the slots' caches; the next
//! such request (any engine work, `/slots` included) reloads them before it is served. The
//! routes llama-server exempts (`/health`, `GET /props`, `/models`, `/metrics`) neither need nor
//! wake the model, and `/props` reports `is_sleeping`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use crate::scheduler::Work;

pub struct Sleep {
    /// `None`: the server never sleeps.
    idle: Option<Duration>,
    sleeping: AtomicBool,
    epoch: Instant,
    /// When the last request needing the model arrived, in milliseconds since `epoch`.
    last_request_ms: AtomicU64,
}

impl Sleep {
    pub fn new(idle: Option<Duration>) -> Sleep {
        Sleep {
            idle,
            sleeping: AtomicBool::new(false),
            epoch: Instant::now(),
            last_request_ms: AtomicU64::new(0),
        }
    }

    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Acquire)
    }

    pub(crate) fn set_sleeping(&self, sleeping: bool) {
        self.sleeping.store(sleeping, Ordering::Release);
    }

    /// Whether the engine, idle since `idle_since`, should sleep now: both it and the requests
    /// (some, such as `/tokenize`, never reach it) have been quiet for the whole delay.
    pub(crate) fn due(&self, idle_since: Instant) -> bool {
        let Some(idle) = self.idle else {
            return false;
        };
        let last = Duration::from_millis(self.last_request_ms.load(Ordering::Acquire));
        idle_since.elapsed() >= idle && self.epoch.elapsed().saturating_sub(last) >= idle
    }

    /// A request needing the model arrived: restarts the idle delay and, if the model is
    /// unloaded, has the engine load it again and waits until it has.
    pub(crate) async fn wake(&self, jobs: &Mutex<mpsc::Sender<Work>>, failed: impl Fn() -> bool) {
        self.touch();
        if !self.is_sleeping() {
            return;
        }
        if let Ok(jobs) = jobs.lock() {
            let _ = jobs.send(Work::Wake);
        }
        // The engine clears the flag once the model is back, or stops on an error (`failed`).
        while self.is_sleeping() && !failed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.touch();
    }

    fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last_request_ms.store(now, Ordering::Release);
    }
}
