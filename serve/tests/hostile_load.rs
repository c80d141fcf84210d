//! `agentrt serve` under a hostile load, on loopback with real clients.
//!
//! A flood of 1,000 requests at once: a tenth from clients that go away after the first token of a long
//! reply, a tenth with prompts past the context, a tenth read slowly, and a tenth streamed to clients that
//! never read a byte of the reply nor close the connection (a raw socket with a small receive window, held
//! open to the end). Every client that stays gets its answer (or its 400), the gone ones are cancelled or
//! never admitted, the never-reading ones' sequences run to their end while their sockets stay open, without
//! holding a slot or being cancelled, the engine's counters add up, and the server answers normally
//! afterwards.
//!
//! Then what a never-reading client costs the server: a few of them with replies far past what the kernel's
//! socket buffers take, the server's heap they hold (by a counting allocator: what their connections'
//! closing frees) against the bound `http::stream_reply` states. The numbers are printed
//! (docs/reliability.md quotes them). And with `--timeout-s`, the server itself closes such a client's
//! connection once its reply has waited that long, freeing its request.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::tiny::{tiny_config, tiny_policy, tiny_policy_with};
use agentrt_policy::{Arch, ModelConfig};
use agentrt_serve::engine::Event;
use agentrt_serve::{ServeConfig, ServerState};
use serde_json::{json, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Counts the heap this process holds, in bytes: what a never-reading client costs the server is what
/// closing its connection frees.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged, so
// `Counting` keeps `System`'s contract; the counter is bookkeeping beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's `layout` meets `alloc`'s contract, which is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from this allocator, that is from `System`, with this `layout`.
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from `System` with `layout`; `new_size` meets `realloc`'s contract (the caller's).
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The two tests measure the heap of the whole process: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FLOOD: usize = 1000;
/// The never-reading clients' receive buffer (the kernel's default, 128 KiB on Linux, would take a whole
/// tiny-model reply).
const NEVER_READ_RCVBUF: u32 = 4096;

fn request(i: usize) -> Value {
    let content = if i % 10 == 1 { "x".repeat(2000) } else { format!("Question {i}?") };
    let (stream, max_tokens) = match i % 10 {
        2 => (true, 200),
        3 => (true, 6),
        4 => return never_read_request(200),
        _ => (false, 6),
    };
    json!({"model": "tiny", "messages": [{"role": "user", "content": content}], "temperature": 1.0, "seed": i, "max_tokens": max_tokens, "stream": stream})
}

/// What the never-reading clients ask: greedy, so that each samples the same reply, with log-probs, so that
/// every token is a chunk.
fn never_read_request(max_tokens: usize) -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "Never read?"}], "temperature": 0.0, "max_tokens": max_tokens, "logprobs": true, "stream": true})
}

/// Sends a streamed request over a raw socket and returns the socket, never read.
async fn never_reading_client(addr: SocketAddr, max_tokens: usize) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(NEVER_READ_RCVBUF).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let body = never_read_request(max_tokens).to_string();
    let head = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    stream
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The IPv4 TCP sockets of this machine (`/proc/net/tcp`): local port, remote port, bytes in the send queue,
/// bytes in the receive queue.
fn tcp_sockets() -> Vec<(u16, u16, u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port = |addr: &str| addr.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some((port(f.get(1)?)?, port(f.get(2)?)?, u64::from_str_radix(tx, 16).ok()?, u64::from_str_radix(rx, 16).ok()?))
        })
        .collect()
}

/// What the never-reading clients hold: the server's heap, and the kernel's bytes (the server's send queues
/// and the clients' unread receive queues), per client.
struct NeverReadCost {
    heap: usize,
    kernel: u64,
}

/// Measures what `clients`, connected to the server on `server_port`, hold, then closes them and waits for
/// the server to drop their connections. Every one of them must have been sent part of its reply. (Nothing
/// else in the process is to run meanwhile.)
async fn close_never_reading(clients: Vec<TcpStream>, server_port: u16) -> NeverReadCost {
    let ports: Vec<u16> = clients.iter().map(|s| s.local_addr().unwrap().port()).collect();
    let unread = || -> Vec<u64> {
        let sockets = tcp_sockets();
        ports.iter().map(|p| sockets.iter().filter(|s| s.0 == *p && s.1 == server_port).map(|s| s.3).sum()).collect()
    };
    eventually("a never-reading client was sent nothing", || unread().iter().all(|&b| b > 0)).await;
    let unread: u64 = unread().iter().sum();
    let sending: u64 = tcp_sockets().iter().filter(|s| s.0 == server_port && ports.contains(&s.1)).map(|s| s.2).sum();
    let heap_open = LIVE.load(Ordering::Relaxed);
    drop(clients);
    eventually("the server kept a never-reading client's connection after the client closed it", || {
        !tcp_sockets().iter().any(|s| s.0 == server_port && ports.contains(&s.1))
    })
    .await;
    // The sockets leave the table when reset; the server's tasks free their connections when they next run.
    let mut heap_closed = LIVE.load(Ordering::Relaxed);
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        heap_closed = heap_closed.min(LIVE.load(Ordering::Relaxed));
    }
    NeverReadCost { heap: heap_open.saturating_sub(heap_closed) / ports.len(), kernel: (unread + sending) / ports.len() as u64 }
}

/// A loopback listener whose queue takes the whole flood's connections at once: `TcpListener::bind` asks
/// for 128, and past that the kernel answers with SYN cookies and drops, and a client that sent its request
/// at once and never reads may have its connection reset before the server sees it. Accepted sockets
/// inherit `send_buffer` (bytes, `SO_SNDBUF`), which turns off the kernel's growing it.
fn listen(send_buffer: Option<u32>) -> tokio::net::TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(bytes) = send_buffer {
        socket.set_send_buffer_size(bytes).unwrap();
    }
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    socket.listen(2 * FLOOD as u32).unwrap()
}

enum Outcome {
    Left,
    NeverRead(TcpStream),
    Answered(usize, u16, String),
}

/// Waits (60 s at most) for `done`, polling.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(60), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_hostile_clients_leaves_every_other_client_answered() {
    let _serial = SERIAL.lock().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = ServerState::new(tiny_policy(Arch::Llama, 3).unwrap(), "tiny", ServeConfig::default()).unwrap();
    let listener = listen(None);
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}/v1/chat/completions");
    tokio::spawn(agentrt_serve::http::serve(listener, state.clone()));
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..FLOOD)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                if i % 10 == 4 {
                    return Outcome::NeverRead(never_reading_client(addr, 200).await);
                }
                let mut r = client.post(&url).json(&request(i)).send().await.unwrap();
                if i % 10 == 2 {
                    // Gone after the first token (the chunk after the role's): its sequence is cancelled
                    // mid-reply (or had ended).
                    let mut seen = String::new();
                    while seen.matches("data:").count() < 2 {
                        match r.chunk().await {
                            Ok(Some(c)) => seen.push_str(&String::from_utf8_lossy(&c)),
                            _ => break,
                        }
                    }
                    return Outcome::Left;
                }
                let status = r.status().as_u16();
                let mut body = Vec::new();
                while let Some(chunk) = r.chunk().await.unwrap() {
                    if i % 10 == 3 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    body.extend_from_slice(&chunk);
                }
                Outcome::Answered(i, status, String::from_utf8_lossy(&body).into_owned())
            })
        })
        .collect();
    let (mut answered, mut never_reading) = (0, Vec::new());
    for t in tasks {
        let (i, status, body) = match t.await.unwrap() {
            Outcome::Left => continue,
            Outcome::NeverRead(socket) => {
                never_reading.push(socket);
                continue;
            }
            Outcome::Answered(i, status, body) => (i, status, body),
        };
        match i % 10 {
            1 => {
                assert_eq!(status, 400, "request {i}: {body}");
                assert!(body.contains("maximum context length"), "request {i}: {body}");
            }
            3 => assert!(status == 200 && body.contains("[DONE]"), "request {i}: {status} {body}"),
            _ => {
                assert_eq!(status, 200, "request {i}: {body}");
                let v: Value = serde_json::from_str(&body).unwrap();
                assert!(v["usage"]["completion_tokens"].as_u64().is_some_and(|n| (1..=6).contains(&n)), "request {i}: {body}");
            }
        }
        answered += 1;
    }
    assert_eq!(answered, FLOOD - 2 * FLOOD / 10);
    assert_eq!(never_reading.len(), FLOOD / 10);
    // Every request that was not refused reaches the engine (a leaver's may be abandoned before it is
    // admitted), and every sequence ends, the never-reading clients' too, while those still hold their sockets
    // unread: the engine does not wait on a client, and no slot is kept for one.
    let reached = (FLOOD - FLOOD / 10) as u64;
    eventually("a request never reached the engine", || state.stats().sequences + state.stats().abandoned == reached).await;
    eventually("a sequence never ended", || state.stats().running == 0).await;
    // The server still answers, and its counters add up: every admitted sequence ended once, and only the
    // leavers' were cancelled.
    let v: Value = client.post(&url).json(&request(0)).send().await.unwrap().json().await.unwrap();
    assert!(v["choices"][0]["finish_reason"].as_str().is_some(), "{v}");
    let stats = state.stats();
    assert_eq!(stats.sequences + stats.abandoned, reached + 1, "{stats:?}");
    assert!(stats.largest_step <= ServeConfig::default().max_num_seqs, "{stats:?}");
    assert!(stats.cancelled + stats.abandoned > 0, "the clients that left freed their slots: {stats:?}");
    assert!(stats.cancelled + stats.abandoned <= (FLOOD / 10) as u64, "a client that stayed was cancelled: {stats:?}");
    let cost = close_never_reading(never_reading, addr.port()).await;
    println!(
        "flood of {FLOOD}: {stats:?}; each never-reading client (a 200-token reply) held {} B of the server's heap and {} B in the kernel's socket queues; peak memory of the test process {:.0} MiB",
        cost.heap,
        cost.kernel,
        peak_rss_mib()
    );
}

/// A client that never reads a long streamed reply leaves the server holding the engine's compact events
/// (one per token, `size_of::<Event>()` bytes) and the choice's completion, not the reply's text: the chunks
/// are written only as the socket takes them. Its sequence still runs to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_costs_the_server_its_tokens_not_its_text() {
    const CLIENTS: usize = 4;
    const MAX_TOKENS: usize = 1500;
    let _serial = SERIAL.lock().await;
    let model = tiny_policy_with(ModelConfig { max_position_embeddings: 2048, ..tiny_config(Arch::Llama) }, 3).unwrap();
    let state = ServerState::new(model, "tiny", ServeConfig::default()).unwrap();
    // A small send buffer, as under the kernel's memory pressure, so that what the server holds is its own.
    // (Loopback's default grows to take a whole reply of a few MiB: the flood's never-reading clients' replies
    // all lie in the kernel.)
    let listener = listen(Some(4096));
    let addr = listener.local_addr().unwrap();
    tokio::spawn(agentrt_serve::http::serve(listener, state.clone()));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(never_reading_client(addr, MAX_TOKENS).await);
    }
    eventually("a never-reading client's request never reached the engine", || state.stats().sequences == CLIENTS as u64).await;
    eventually("a never-reading client's sequence never ended", || state.stats().running == 0).await;
    let stats = state.stats();
    assert_eq!(stats.cancelled + stats.abandoned, 0, "{stats:?}");
    let tokens = stats.generated_tokens as usize / CLIENTS;
    let cost = close_never_reading(clients, addr.port()).await;
    // The bound `stream_reply` states: an event per token and the end, and the completion (its ids,
    // log-probs and text: 12 bytes a token at most here, byte tokens decoding to at most 3 bytes each, its
    // vectors up to twice that grown), beside a connection's own buffers (64 KiB allowed for them). Holding
    // the reply as its chunks instead, as the server did before, took about 590 bytes a token here.
    let per_token = size_of::<Event>() + 2 * 12;
    let bound = (tokens + 1) * per_token + (64 << 10);
    assert!(tokens > 1000, "the replies were to be long: {stats:?}");
    assert!(cost.kernel < 64 << 10, "the kernel took most of the replies ({} B a client): nothing measured", cost.kernel);
    assert!(cost.heap <= bound, "a never-reading client held {} B of the server's heap for {tokens} tokens, over {bound} B", cost.heap);
    println!(
        "{CLIENTS} never-reading clients, {tokens} tokens of reply each: each held {} B of the server's heap ({:.1} B a token, an event being {} B) and {} B in the kernel's socket queues",
        cost.heap,
        cost.heap as f64 / tokens as f64,
        size_of::<Event>(),
        cost.kernel
    );
}

/// With a write timeout (`--timeout-s`), a client that never reads is cut off once its reply has waited that
/// long for it: the server closes the connection (what the kernel held of the reply arrives, then the end,
/// without `[DONE]`), its request is cancelled if it still runs and its queued reply freed, the closing is
/// counted and logged, and the one slot of the server answers the next client.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_is_cut_off_after_the_write_timeout() {
    const MAX_TOKENS: usize = 6000;
    let _serial = SERIAL.lock().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Wide enough that its greedy reply (1,414 tokens, then the end of turn) takes seconds: the reply is cut
    // off while its sequence runs.
    let wide = ModelConfig { hidden_size: 256, intermediate_size: 512, head_dim: 64, max_position_embeddings: 8192, ..tiny_config(Arch::Llama) };
    let model = tiny_policy_with(wide, 2).unwrap();
    let config = ServeConfig { max_num_seqs: 1, write_timeout: Some(Duration::from_secs(1)), ..ServeConfig::default() };
    let state = ServerState::new(model, "tiny", config).unwrap();
    let listener = listen(Some(4096));
    let addr = listener.local_addr().unwrap();
    tokio::spawn(agentrt_serve::http::serve(listener, state.clone()));
    let sent = Instant::now();
    let mut client = never_reading_client(addr, MAX_TOKENS).await;
    eventually("the server never closed the never-reading client's connection", || state.write_timeouts() == 1).await;
    assert!(sent.elapsed() >= Duration::from_secs(1), "closed before the timeout: {:?}", sent.elapsed());
    eventually("the never-reading client's sequence never ended", || state.stats().running == 0).await;
    let mut reply = Vec::new();
    // The end of the stream (or a reset): a connection left open would keep this waiting.
    let read = tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut reply)).await;
    assert!(read.is_ok(), "the connection stayed open after the write timeout");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200") && reply.contains("data: "), "{reply}");
    assert!(!reply.contains("[DONE]"), "the whole reply was written: {} bytes", reply.len());
    // The one slot is free: the next client is answered.
    let url = format!("http://{addr}/v1/chat/completions");
    let r = reqwest::Client::new().post(&url).json(&request(0)).timeout(Duration::from_secs(60)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await.unwrap();
    // The reply is whole before the engine's step that ended its sequence is counted (on a busy machine,
    // a moment later): wait for that count, not for the reply.
    eventually("the next client's sequence never ended", || state.stats().running == 0).await;
    let stats = state.stats();
    // Whether the cut-off sequence was still decoding when its connection closed (then it is cancelled) or
    // had already ended (its queued events go with the connection) depends on the machine's speed: on a
    // busy machine it is cancelled mid-reply, on an idle one the tiny model may finish within the second.
    assert_eq!((stats.sequences, stats.running), (2, 0), "the cut-off sequence was to end: {stats:?}");
    assert!(stats.cancelled <= 1, "{stats:?}");
    assert!(stats.generated_tokens < MAX_TOKENS as u64, "{stats:?}");
    println!("never-reading client cut off after {:?} ({} B of the reply reached it): {stats:?}", sent.elapsed(), reply.len());
}
