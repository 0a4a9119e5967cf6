//! The documentation holds together: every relative link of README.md, docs/ and kb/README.md
//! resolves to a file of the repository (and an anchor, when it names one, to a heading or an
//! `<a id>` of that file), and README.md stays a landing page.

use std::path::{Path, PathBuf};

use crate::support::repo;

/// The Markdown files whose links are checked.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md"), repo().join("kb/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// `(target, line)` of every inline link `[text](target)` outside code blocks.
fn links(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((after[..end].to_string(), n + 1));
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lowercase, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect();
    for part in text.split("<a id=\"").skip(1) {
        if let Some(end) = part.find('"') {
            out.push(part[..end].to_string());
        }
    }
    out
}

fn resolve(page: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !file.exists() {
        return Err(format!("{} does not exist", file.display()));
    }
    if let Some(anchor) = anchor.filter(|a| !a.is_empty()) {
        let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
        if !anchors(&text).iter().any(|a| a == anchor) {
            return Err(format!("no anchor #{anchor} in {}", file.display()));
        }
    }
    Ok(())
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("readable");
        for (target, line) in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            if let Err(e) = resolve(&page, &target) {
                broken.push(format!("{}:{line}: ({target}): {e}", page.display()));
            }
        }
    }
    assert!(checked > 20, "the link check found only {checked} links");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_landing_page_that_starts_with_the_two_commands() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    assert!(readme.lines().count() <= 300, "README.md is over 300 lines");
    let first_block: Vec<&str> = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .map(|b| b.lines().collect())
        .unwrap_or_default();
    assert_eq!(first_block.len(), 2, "{first_block:?}");
    assert!(first_block[0].starts_with("scripts/run.sh"));
    assert!(first_block[1].starts_with("scripts/test.sh"));
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.contains("scripts/test.sh"),
        ".ci/run runs the README's test command"
    );
}

#[test]
fn broken_links_are_caught() {
    let page = repo().join("README.md");
    assert!(resolve(&page, "docs/kafka.md").is_ok());
    assert!(resolve(&page, "docs/no-such-page.md").is_err());
    assert!(resolve(&page, "docs/runbooks.md#runbook-nccltimeoutspike").is_ok());
    assert!(resolve(&page, "docs/runbooks.md#no-such-anchor").is_err());
    assert_eq!(
        slug(" Output contract (schema_version 1)"),
        "output-contract-schema_version-1"
    );
}
