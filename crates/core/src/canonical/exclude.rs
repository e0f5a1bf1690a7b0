//! Exclusions: a trie of excluded pointers, applied to the parsed document in one walk.

use std::collections::BTreeMap;

use serde_json::Value;

use super::pointer::Segment;

/// A trie of excluded pointers.
#[derive(Clone, Debug, Default)]
pub(super) struct ExclusionNode {
    /// A pointer ends here: the value at this node is removed.
    excluded: bool,
    /// Continuations through a named member or index.
    keys: BTreeMap<String, ExclusionNode>,
    /// Continuation through `*`.
    wildcard: Option<Box<ExclusionNode>>,
}

impl ExclusionNode {
    pub(super) fn is_empty(&self) -> bool {
        !self.excluded && self.keys.is_empty() && self.wildcard.is_none()
    }

    pub(super) fn insert(&mut self, segments: Vec<Segment>) {
        let mut node = self;
        for segment in segments {
            node = match segment {
                Segment::Key(key) => node.keys.entry(key).or_default(),
                Segment::Wildcard => node.wildcard.get_or_insert_with(Box::default),
            };
        }
        node.excluded = true;
    }
}

/// The trie nodes reached from `nodes` through a child named `key`.
fn descend<'a>(nodes: &[&'a ExclusionNode], key: &str) -> Vec<&'a ExclusionNode> {
    nodes.iter().flat_map(|node| node.keys.get(key).into_iter().chain(node.wildcard.as_deref())).collect()
}

/// Removes every excluded member/element below `value`; `nodes` are the trie nodes matching
/// `value` itself (never excluded: that is decided by the parent).
pub(super) fn apply_exclusions(value: &mut Value, nodes: &[&ExclusionNode]) {
    match value {
        Value::Object(map) => map.retain(|key, child| keep_child(child, &descend(nodes, key))),
        Value::Array(items) => {
            let mut index = 0usize;
            items.retain_mut(|child| {
                let matched = descend(nodes, &index.to_string());
                index += 1;
                keep_child(child, &matched)
            });
        }
        _ => {}
    }
}

/// Whether a child reached through the trie nodes `matched` survives; prunes inside it if so.
fn keep_child(child: &mut Value, matched: &[&ExclusionNode]) -> bool {
    if matched.iter().any(|node| node.excluded) {
        return false;
    }
    if !matched.is_empty() {
        apply_exclusions(child, matched);
    }
    true
}
