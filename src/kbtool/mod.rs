//! What a KB author runs, above the model and the engines it uses: [`check`] (`faultline kb
//! check`: a KB proven sound in both engines, its advice and review trail checked) and
//! [`import`] (the seed knowledge base's Markdown and JSON into entries).
//!
//! The model ([`crate::kb`]) stays below the matchers: loading a KB needs no engine.

pub mod check;
pub mod import;
