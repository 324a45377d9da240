//! Finding a kallsyms symbol by name without a copy of every name: the index keys each name
//! by a 64-bit hash of it and keeps the symbol's place; a lookup compares the name found
//! there. Built on every run's start for ~200,000 symbols, of which it looks up a few: with
//! the names copied into a `HashMap<String, usize>` it took 30 ms of the 55 ms that reading
//! the table took on the host (6.18, 121,000 symbols), ~0.4 s in a TCG guest.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::KernelSymbol;

/// Each name's symbol: the first function of that name, else its first symbol.
pub(super) struct NameIndex {
    by_hash: HashMap<u64, usize, BuildHasherDefault<AlreadyHashed>>,
    /// Names whose hash another name has (none is expected; correct if there is one).
    collided: HashMap<String, usize>,
}

impl NameIndex {
    /// The index of `symbols`, and the names more than one function has.
    pub(super) fn build(symbols: &[KernelSymbol]) -> (Self, HashSet<String>) {
        let mut index = Self {
            by_hash: HashMap::with_capacity_and_hasher(symbols.len(), Default::default()),
            collided: HashMap::new(),
        };
        let mut shared = HashSet::new();
        for (place, symbol) in symbols.iter().enumerate() {
            let existing = match index.by_hash.get(&name_hash(&symbol.name)) {
                None => None,
                Some(&existing) if symbols[existing].name == symbol.name => Some(existing),
                Some(_) => index.collided.get(&symbol.name).copied(),
            };
            let Some(existing) = existing else {
                index.insert(symbols, place);
                continue;
            };
            let first = &symbols[existing];
            if symbol.is_function() && first.is_function() {
                shared.insert(symbol.name.clone());
            }
            // A function takes the name from a data symbol listed before it.
            if symbol.is_function() && !first.is_function() {
                index.insert(symbols, place);
            }
        }
        (index, shared)
    }

    fn insert(&mut self, symbols: &[KernelSymbol], place: usize) {
        let name = &symbols[place].name;
        let slot = self.by_hash.entry(name_hash(name)).or_insert(place);
        if symbols[*slot].name == *name {
            *slot = place;
        } else {
            self.collided.insert(name.clone(), place);
        }
    }

    /// The place of `name`'s symbol in the table the index was built from.
    pub(super) fn get(&self, symbols: &[KernelSymbol], name: &str) -> Option<usize> {
        match self.by_hash.get(&name_hash(name)) {
            Some(&place) if symbols[place].name == name => Some(place),
            Some(_) => self.collided.get(name).copied(),
            None => None,
        }
    }

    /// The place of each name's symbol, in no order.
    pub(super) fn places(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_hash.values().chain(self.collided.values()).copied()
    }
}

/// FxHash's multiply-rotate over the name's bytes, eight at a time.
fn name_hash(name: &str) -> u64 {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mix = |hash: u64, word: u64| (hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    let mut chunks = name.as_bytes().chunks_exact(8);
    let mut hash = (&mut chunks).fold(0, |hash, chunk| {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        mix(hash, u64::from_le_bytes(word))
    });
    for &byte in chunks.remainder() {
        hash = mix(hash, u64::from(byte));
    }
    mix(hash, name.len() as u64)
}

/// The map's keys are hashes already: used as they are.
#[derive(Default)]
struct AlreadyHashed(u64);

impl Hasher for AlreadyHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(name: &str, kind: char) -> KernelSymbol {
        KernelSymbol {
            address: 1,
            kind,
            name: name.into(),
            module: None,
        }
    }

    #[test]
    fn the_first_function_of_a_name_wins_over_data_and_later_functions() {
        let symbols = [
            symbol("twice", 'd'),
            symbol("twice", 't'),
            symbol("twice", 'T'),
            symbol("once", 'T'),
            symbol("data", 'b'),
            symbol("data", 'd'),
        ];
        let (index, shared) = NameIndex::build(&symbols);
        assert_eq!(index.get(&symbols, "twice"), Some(1));
        assert_eq!(index.get(&symbols, "once"), Some(3));
        assert_eq!(index.get(&symbols, "data"), Some(4));
        assert_eq!(index.get(&symbols, "missing"), None);
        assert_eq!(shared, HashSet::from(["twice".to_string()]));
        let mut places: Vec<usize> = index.places().collect();
        places.sort();
        assert_eq!(places, [1, 3, 4]);
    }

    #[test]
    fn a_name_whose_hash_is_taken_is_still_found() {
        let symbols = [symbol("a", 'T'), symbol("b", 'T')];
        let (mut index, _) = NameIndex::build(&symbols[..1]);
        // "a" sits in "b"'s slot, as if their hashes were equal.
        index.by_hash.insert(name_hash("b"), 0);
        index.insert(&symbols, 1);
        assert_eq!(index.get(&symbols, "a"), Some(0));
        assert_eq!(index.get(&symbols, "b"), Some(1));
        assert_eq!(
            index.places().count(),
            3,
            "a twice (its own slot and b's), b once"
        );
    }

    #[test]
    fn names_of_every_length_hash_apart() {
        let names = ["", "a", "ab", "abcdefgh", "abcdefghi", "abcdefgh\0"];
        let hashes: HashSet<u64> = names.iter().map(|name| name_hash(name)).collect();
        assert_eq!(hashes.len(), names.len());
    }
}
