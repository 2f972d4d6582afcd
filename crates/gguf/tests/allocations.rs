//! "No allocation larger than the file": a counting global allocator records the largest single
//! allocation made while parsing, which must not exceed the size of the input — for every malformed
//! file (counts of 2^60 included), every truncation of the base file, and the golden files.
//!
//! The guarantee is structural: a count is never trusted beyond what the remaining bytes can hold,
//! and collections grow as elements are parsed. Parsed entries are larger in memory than their
//! smallest encoding (a key/value pair is 64 bytes in memory, 13 in the file), so a file made of
//! nothing but tiny entries can need a few times its size; the last test bounds that factor.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use oxibonsai_gguf::{validate_bytes, GgufFile};
use oxibonsai_testkit::golden;

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the slot may be gone while a thread shuts down.
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator; we only record sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The largest single allocation made by `f` on this thread.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(|l| l.get())
}

fn check(name: &str, bytes: Vec<u8>) {
    // Whatever the input, a few fixed-size structures (the error, the first vector slots) are allowed.
    let size = bytes.len().max(1024);
    let validating = largest_allocation(|| drop(validate_bytes(&bytes)));
    assert!(
        validating <= size,
        "{name}: validate_bytes allocated {validating} bytes for a {size}-byte input"
    );
    let opening = largest_allocation(|| drop(GgufFile::from_bytes(bytes)));
    assert!(
        opening <= size,
        "{name}: from_bytes allocated {opening} bytes for a {size}-byte input"
    );
}

#[test]
fn no_single_allocation_exceeds_the_input() {
    let corpus = common::corpus();
    for case in corpus {
        check(case.name, case.bytes);
    }
    let base = common::base_file();
    for cut in 0..base.len() {
        check(&format!("base cut at {cut}"), base[..cut].to_vec());
    }
    for path in [
        "tokenizer/qwen3/qwen3-vocab.gguf",
        "tokenizer/smollm2/smollm2-vocab.gguf",
        "models/qwen3-mixed.gguf",
    ] {
        check(path, std::fs::read(golden(path)).expect("readable"));
    }
}

#[test]
fn the_allocator_sees_allocations() {
    // The check above is only meaningful if allocations are observed.
    let seen = largest_allocation(|| drop(std::hint::black_box(vec![0u8; 4096])));
    assert!(seen >= 4096);
}

/// A header of `n` key/value pairs with short hex keys and u8 values: 14 to 17 bytes each.
fn tiny_entries(n: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&n.to_le_bytes());
    for i in 0..n {
        let key = format!("{i:x}");
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key.as_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.push(1);
    }
    b.resize(b.len().next_multiple_of(32), 0);
    b
}

#[test]
fn a_file_of_tiny_entries_needs_a_bounded_multiple_of_its_size() {
    let bytes = tiny_entries(20_000);
    let size = bytes.len();
    let largest = largest_allocation(|| {
        let file = GgufFile::from_bytes(bytes).expect("valid");
        assert_eq!(file.metadata().len(), 20_000);
    });
    println!(
        "{size}-byte file of tiny entries: largest allocation {largest} bytes ({:.2}x)",
        largest as f64 / size as f64
    );
    assert!(
        largest <= 8 * size,
        "{largest} bytes for a {size}-byte file"
    );
}
