//! Embeds the shipped knowledge base (`kb/**/*.toml`) into the binary, so `faultline` works from
//! any directory without a KB path.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Every file below `dir` whose extension is `ext` (any file when `ext` is `None`).
fn collect(dir: &Path, ext: Option<&str>, out: &mut Vec<PathBuf>) {
    let Ok(read) = fs::read_dir(dir) else { return };
    for entry in read.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, ext, out);
        } else if ext.is_none_or(|ext| path.extension().is_some_and(|e| e == ext)) {
            out.push(path);
        }
    }
}

/// FNV-1a over every source file (path and text, in path order), `Cargo.lock` and this script:
/// the build's identity (`faultline::cache::BUILD_ID`), which keys the plans and check memos kept
/// between runs, so that another build never reads what this one wrote.
fn build_id(root: &Path) -> String {
    let mut files = Vec::new();
    collect(&root.join("src"), None, &mut files);
    files.sort();
    files.push(root.join("Cargo.lock"));
    files.push(root.join("build.rs"));
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for path in files {
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let text = fs::read(&path).unwrap_or_default();
        for &byte in rel
            .as_bytes()
            .iter()
            .chain([0u8].iter())
            .chain(&text)
            .chain([0u8].iter())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let kb = root.join("kb");
    println!("cargo:rerun-if-changed=kb");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rustc-env=FAULTLINE_BUILD_ID={}", build_id(&root));
    let mut files = Vec::new();
    collect(&kb, Some("toml"), &mut files);
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
