//! What the fake index (`common`) and the fake Hub (`fake_hub`) share: a listener on a free port
//! of 127.0.0.1 whose connections a background thread serves until it is stopped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

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
