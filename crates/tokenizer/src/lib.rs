//! placeholder
pub mod chat_template;
