//! The README pastes some of `docs/`: each pasted file must appear in it whole, its headings one
//! level down, so that an edit to one and not the other fails here.

use crate::support::repo;

/// `docs/<name>` without its title, its headings one level down.
fn demoted(name: &str) -> String {
    let text = std::fs::read_to_string(repo().join("docs").join(name)).expect("the doc exists");
    let body: Vec<String> = text
        .lines()
        .skip(1)
        .map(|l| {
            if l.starts_with('#') {
                format!("#{l}")
            } else {
                l.to_string()
            }
        })
        .collect();
    body.join("\n").trim().to_string()
}

#[test]
fn the_readme_holds_every_doc_it_pastes() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    for (doc, heading) in [
        ("kafka.md", "## Streaming from Kafka\n"),
        ("incidents.md", "## Incidents\n"),
        ("security.md", "## Secret redaction\n"),
        ("limits.md", "## Limits (all components)\n"),
    ] {
        let body = demoted(doc);
        let at = readme
            .find(heading)
            .unwrap_or_else(|| panic!("README has no {heading:?}"));
        assert!(
            readme[at..].starts_with(&format!("{heading}\n{body}\n")),
            "README's {heading:?} section differs from docs/{doc}: paste the doc again"
        );
    }
}
