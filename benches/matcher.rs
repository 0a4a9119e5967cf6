//! Matcher micro-benchmarks on the shipped KB over a generated corpus (healthy training output
//! with 0.1% KB example lines):
//!
//! - `hyperscan/buffer`: one Hyperscan call per 1 MiB of lines, on the database `scan` uses (the
//!   patterns' required literals; Hyperscan needs minutes to compile the whole patterns);
//! - `hyperscan/line`: the same database, one call per line;
//! - `regexset/line`: the `regex` crate's `RegexSet`, line by line (the oracle's engine until the KB
//!   outgrew the set's lazy DFA; the oracle now runs each pattern's own regex);
//! - `aho-corasick+regexset/line`: an Aho-Corasick prefilter on each pattern's required
//!   literals, then the `RegexSet` only on lines that contain one (patterns without such a
//!   literal run on every line, in a set of their own);
//! - `engine/buffer`: the whole engine (hits to lines, decoding, confirmation, captures).
//!
//! Run with `cargo bench --bench matcher`.

// `criterion_group!` generates an undocumented `pub fn benches`, and a lint attribute on the
// macro call is ignored: the bench binary, which has no API to document, opts out as a whole.
#![allow(missing_docs)]

use aho_corasick::AhoCorasick;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use faultline::engine::{ChunkInfo, Engine};
use faultline::kb::KnowledgeBase;
use faultline::matcher::Matcher;
use regex::bytes::RegexSetBuilder;

fn corpus(kb: &KnowledgeBase) -> Vec<u8> {
    let mut out = Vec::new();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs each function once, as a
    // check that it works: there a small corpus does (the line-by-line RegexSet over 4 MiB takes
    // minutes in a test build).
    let size = if std::env::args().any(|a| a == "--bench") {
        4 << 20
    } else {
        256 << 10
    };
    faultline::bench::write_corpus(kb, &[], size, 0.001, 3, &mut out).expect("corpus");
    // Whole lines only, and at most 1 MiB per Hyperscan call below.
    out
}

/// Literals one of which every match of `pattern` contains (its prefixes, as the oracle's
/// prefilter takes them), or `None` when there is no such set worth using: then the line must go
/// to the regexes anyway.
fn required_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    faultline::matcher::regex::literal_prefixes(pattern).filter(|l| l.iter().all(|x| x.len() >= 3))
}

fn matchers(c: &mut Criterion) {
    let kb = KnowledgeBase::embedded().expect("kb");
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let data = corpus(&kb);
    // The database `scan` uses, through the database cache; the engine below shares it.
    let engine = Engine::new(kb.clone()).expect("compiles");
    let hs = &engine.matcher;
    let set = RegexSetBuilder::new(&sources)
        .unicode(false)
        .size_limit(256 << 20)
        .dfa_size_limit(64 << 20)
        .build()
        .expect("compiles");
    let literal_sets: Vec<Option<Vec<Vec<u8>>>> =
        sources.iter().map(|p| required_literals(p)).collect();
    let always: Vec<usize> = literal_sets
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_none())
        .map(|(i, _)| i)
        .collect();
    let always_set = RegexSetBuilder::new(always.iter().map(|&i| sources[i]))
        .unicode(false)
        .size_limit(256 << 20)
        .dfa_size_limit(64 << 20)
        .build()
        .expect("compiles");
    let literals: Vec<Vec<u8>> = literal_sets.iter().flatten().flatten().cloned().collect();
    let ac = AhoCorasick::new(&literals).expect("automaton");

    let mut group = c.benchmark_group("matcher");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(10);
    group.bench_function("hyperscan/buffer", |b| {
        let mut scratch = hs.scratch().expect("scratch");
        let mut hits = Vec::new();
        b.iter(|| {
            hits.clear();
            for chunk in data.chunks(1 << 20) {
                hs.find(&mut scratch, chunk, &mut hits).expect("scan");
            }
            hits.len()
        })
    });
    group.bench_function("hyperscan/line", |b| {
        let mut scratch = hs.scratch().expect("scratch");
        let mut hits = Vec::new();
        b.iter(|| {
            hits.clear();
            for line in data.split(|&b| b == b'\n') {
                hs.find(&mut scratch, line, &mut hits).expect("scan");
            }
            hits.len()
        })
    });
    group.bench_function("regexset/line", |b| {
        b.iter(|| {
            data.split(|&b| b == b'\n')
                .filter(|l| set.is_match(l))
                .count()
        })
    });
    group.bench_function("aho-corasick+regexset/line", |b| {
        b.iter(|| {
            data.split(|&b| b == b'\n')
                .filter(|l| (ac.is_match(l) && set.is_match(l)) || always_set.is_match(l))
                .count()
        })
    });
    group.bench_function("engine/buffer", |b| {
        let mut worker = engine.worker().expect("worker");
        b.iter(|| {
            let mut n = 0usize;
            let mut start = 0;
            while start < data.len() {
                let mut end = (start + (1 << 20)).min(data.len());
                if end < data.len() {
                    end = start
                        + memchr::memrchr(b'\n', &data[start..end]).map_or(end - start, |i| i + 1);
                }
                engine
                    .scan_chunk(
                        &mut worker,
                        &data[start..end],
                        ChunkInfo {
                            first_line: 1,
                            truncated: false,
                        },
                        &mut |_| n += 1,
                    )
                    .expect("scan");
                start = end;
            }
            n
        })
    });
    group.finish();
}

criterion_group!(benches, matchers);
criterion_main!(benches);
