//! What a sequence's directory should hold: which store each name leads to, and for each store
//! (a lineage: one store file's history, continued by a rebuild, forked by a copy or a backup)
//! the keys it must hold and the keys it may hold.

use std::collections::{BTreeMap, BTreeSet};

/// A store name in the sequence's directory: a file (of a lineage) or a symlink to another name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    /// A store file; hard links are two names of one lineage.
    File(usize),
    /// A symlink to the named store name.
    Link(String),
}

/// One store's history.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lineage {
    /// The prefix of the keys written into it (unique in the sequence).
    pub(crate) prefix: String,
    /// The next key number.
    pub(crate) next: u64,
    /// Keys acknowledged by a writer holding it.
    pub(crate) acked: BTreeSet<String>,
    /// Keys a writer was asked for (acknowledged or in flight when it was killed).
    pub(crate) requested: BTreeSet<String>,
    /// Keys it must hold from the store it was copied from.
    pub(crate) inherited_must: BTreeSet<String>,
    /// Keys it may hold from the store it was copied from.
    pub(crate) inherited_allowed: BTreeSet<String>,
    /// The file alone holds everything acknowledged (closed cleanly, nothing holds it).
    pub(crate) clean: bool,
    /// An operator ran `recover --discard-journal` on it (exit 0).
    pub(crate) discarded: bool,
    /// Its last name was replaced by an operator's `backup --overwrite` while nothing held it.
    pub(crate) replaced: bool,
    /// A copy of the file alone, not opened since, of a store that has not been opened since
    /// either: the two have not diverged yet (the copy's next open may replay what the
    /// original's journal holds, written after the copy), so what the original is asked to
    /// write, the copy may hold.
    pub(crate) follows: Option<usize>,
    /// The file holding its journal's current generation, as far as the operator knows: beside
    /// the name it was last opened through, or where the operator moved it since.
    pub(crate) journal: Option<String>,
}

impl Lineage {
    /// Keys it must hold.
    pub(crate) fn must(&self) -> BTreeSet<String> {
        self.inherited_must.union(&self.acked).cloned().collect()
    }

    /// Keys it may hold.
    pub(crate) fn allowed(&self) -> BTreeSet<String> {
        self.inherited_allowed.union(&self.requested).cloned().collect()
    }
}

/// The directory's expected state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    /// Store names and what they are.
    pub(crate) names: BTreeMap<String, Node>,
    /// Every lineage of the sequence, by id.
    pub(crate) lineages: Vec<Lineage>,
    /// The lineage the writer holds open.
    pub(crate) held: Option<usize>,
}

impl Model {
    /// A new, empty lineage (a store created now): its id.
    pub(crate) fn new_lineage(&mut self) -> usize {
        let id = self.lineages.len();
        self.lineages.push(Lineage { prefix: format!("L{id:02}"), clean: true, ..Lineage::default() });
        id
    }

    /// A copy of lineage `from` as it is now. It must hold what `from` must when the copy was
    /// complete (`complete`: a backup, or a copy of a clean file nothing holds); it may hold
    /// whatever `from` may.
    pub(crate) fn fork(&mut self, from: usize, complete: bool) -> usize {
        let id = self.new_lineage();
        let (must, allowed, discarded) = match self.lineages.get(from) {
            Some(source) => {
                (if complete { source.must() } else { BTreeSet::new() }, source.allowed(), source.discarded)
            }
            None => (BTreeSet::new(), BTreeSet::new(), false),
        };
        if let Some(copy) = self.lineages.get_mut(id) {
            copy.inherited_must = must;
            copy.inherited_allowed = allowed;
            copy.follows = Some(from);
            // What the source gave up by an explicit discard is not in the copy either.
            copy.discarded = discarded;
        }
        id
    }

    /// Lineage `id` was opened (a new journal generation): copies of it, and it as a copy,
    /// diverge now.
    pub(crate) fn opened(&mut self, id: usize) {
        for (at, lineage) in self.lineages.iter_mut().enumerate() {
            if at == id || lineage.follows == Some(id) {
                lineage.follows = None;
            }
        }
    }

    /// Keys lineage `id` is asked to write: copies that have not diverged from it (or from a
    /// copy of it) may hold them too.
    pub(crate) fn request(&mut self, id: usize, keys: &[String]) {
        let mut reached = vec![id];
        let mut grew = true;
        while grew {
            grew = false;
            for (at, lineage) in self.lineages.iter().enumerate() {
                if let Some(from) = lineage.follows
                    && reached.contains(&from)
                    && !reached.contains(&at)
                {
                    reached.push(at);
                    grew = true;
                }
            }
        }
        for at in reached {
            if let Some(lineage) = self.lineages.get_mut(at) {
                if at == id {
                    lineage.requested.extend(keys.iter().cloned());
                } else {
                    lineage.inherited_allowed.extend(keys.iter().cloned());
                }
            }
        }
    }

    /// The store name a name leads to through symlinks (itself for a file).
    pub(crate) fn file_name_of<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        let mut name = name;
        for _ in 0..8 {
            match self.names.get(name)? {
                Node::File(_) => return Some(name),
                Node::Link(target) => name = target,
            }
        }
        None
    }

    /// Lineage `id` was opened through `name` and started a journal generation beside it.
    pub(crate) fn journal_beside(&mut self, id: usize, name: &str) {
        let file = self.file_name_of(name).map(|file| format!("{file}-journal"));
        if let Some(lineage) = self.lineages.get_mut(id) {
            lineage.journal = file;
        }
    }

    /// The operator renamed journal file `from` to `to`.
    pub(crate) fn journal_renamed(&mut self, from: &str, to: &str) {
        for lineage in &mut self.lineages {
            if lineage.journal.as_deref() == Some(from) {
                lineage.journal = Some(to.to_string());
            }
        }
    }

    /// The lineage a name leads to (through symlinks).
    pub(crate) fn resolve(&self, name: &str) -> Option<usize> {
        let mut name = name;
        for _ in 0..8 {
            match self.names.get(name)? {
                Node::File(id) => return Some(*id),
                Node::Link(target) => name = target,
            }
        }
        None
    }

    /// Whether a lineage is held by the writer.
    pub(crate) fn is_held(&self, id: usize) -> bool {
        self.held == Some(id)
    }

    /// Names that are store files (not symlinks), sorted.
    pub(crate) fn file_names(&self) -> Vec<String> {
        self.names.iter().filter(|(_, node)| matches!(node, Node::File(_))).map(|(name, _)| name.clone()).collect()
    }

    /// The names (files first, then symlinks) that lead to lineage `id`.
    pub(crate) fn names_of(&self, id: usize) -> Vec<String> {
        let mut files = Vec::new();
        let mut links = Vec::new();
        for (name, node) in &self.names {
            if self.resolve(name) == Some(id) {
                match node {
                    Node::File(_) => files.push(name.clone()),
                    Node::Link(_) => links.push(name.clone()),
                }
            }
        }
        files.extend(links);
        files
    }

    /// A new file at `name` of lineage `id`: names that were hard links of the file it
    /// replaces keep that file, which becomes a lineage of its own when `fork_rest` (a rebuild
    /// replaced the file under one name).
    pub(crate) fn replace_file(&mut self, name: &str, id: usize, fork_rest: bool) {
        let old = match self.names.get(name) {
            Some(Node::File(old)) => Some(*old),
            _ => None,
        };
        self.names.insert(name.to_string(), Node::File(id));
        if let (Some(old), true) = (old, fork_rest) {
            let others: Vec<String> = self
                .names
                .iter()
                .filter(|(other, node)| other.as_str() != name && **node == Node::File(old))
                .map(|(other, _)| other.clone())
                .collect();
            if !others.is_empty() {
                let copy = self.fork(old, false);
                for other in others {
                    self.names.insert(other, Node::File(copy));
                }
            }
        }
    }

    /// Every key any lineage of the sequence was asked to write.
    pub(crate) fn universe(&self) -> BTreeSet<String> {
        self.lineages.iter().flat_map(|lineage| lineage.requested.iter().cloned()).collect()
    }
}
