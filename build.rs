//! Embeds the shipped knowledge base (`kb/**/*.toml`) into the binary, so `faultline` works from
//! any directory without a KB path.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(read) = fs::read_dir(dir) else { return };
    for entry in read.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let kb = root.join("kb");
    println!("cargo:rerun-if-changed=kb");
    let mut files = Vec::new();
    collect(&kb, &mut files);
    files.sort();
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("embedded_kb.rs");
    let mut f = fs::File::create(out).expect("write OUT_DIR");
    writeln!(
        f,
        "/// The shipped KB: (path relative to `kb/`, file contents)."
    )
    .expect("write");
    writeln!(f, "pub(crate) static EMBEDDED_KB: &[(&str, &str)] = &[").expect("write");
    for path in files {
        let rel = path.strip_prefix(&kb).expect("under kb/");
        let rel = rel.to_string_lossy().replace('\\', "/");
        writeln!(
            f,
            "    ({rel:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("write");
    }
    writeln!(f, "];").expect("write");
}
