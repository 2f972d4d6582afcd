//! What the fake index (`common`) and the fake Hub (`fake_hub`) share: a listener on a free port
//! of 127.0.0.1 whose connections a background thread serves until it is stopped, model-like
//! bytes to serve, and their sha256.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Listener {
    /// Binds a free port of 127.0.0.1.
    pub fn bind() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1")
    }

    /// Serves each connection of `listener` with `serve` on a background thread.
    pub fn serve(
        listener: TcpListener,
        serve: impl Fn(TcpStream) -> std::io::Result<()> + Send + 'static,
    ) -> Listener {
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    // A client that hangs up early is the client's business.
                    let _ = serve(stream);
                }
            })
        };
        Listener {
            stop,
            thread: Some(thread),
            addr,
        }
    }

    /// Stops listening: later connections are refused.
    pub fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(self.addr); // wakes the accept loop
            thread.join().unwrap();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Bytes that look like a small model and differ per `seed`, so a wrong file is noticed.
pub fn fake_gguf(seed: u8, len: usize) -> Vec<u8> {
    let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        bytes.push((state >> 24) as u8);
    }
    bytes
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
