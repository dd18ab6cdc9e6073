//! Bytes as UnixFS blocks, the way the upstream importer lays them out with its defaults
//! (docs/hypermedia.md §3): 256 KiB fixed-size chunks as raw leaves (CIDv1 raw sha2-256); a file
//! of one chunk is that leaf; otherwise a balanced tree of dag-pb nodes with at most 174 links,
//! built level by level (a trailing group of one still gets its own parent). [`Builder`] makes the
//! same tree from a stream of chunks.

use cid::Cid;

use super::blob::{Blob, DAG_PB, RAW, cid_v1_sha256};

/// Bytes per leaf.
pub(crate) const CHUNK_BYTES: usize = 256 * 1024;
/// Links per interior node.
pub(crate) const MAX_CHILDREN: usize = 174;

/// The blocks of a file and its root CID string.
#[derive(Debug, Clone)]
pub struct File {
    /// The root CID (`ipfs://<root>` names the file).
    pub root: String,
    /// Every unique block, leaves first.
    pub blocks: Vec<Blob>,
}

#[derive(Debug)]
struct Child {
    cid: Cid,
    /// Bytes of file content below (a leaf's length, a node's filesize).
    file_size: u64,
    /// Cumulative encoded size (a leaf's length; a node's length plus its links' Tsize).
    tsize: u64,
}

/// Splits `data` into UnixFS blocks (through [`Builder`]; a block repeated in the file is kept
/// once).
pub fn file(data: &[u8]) -> File {
    let mut blocks: Vec<Blob> = Vec::new();
    let mut keep = |new: Vec<Blob>| {
        for blob in new {
            if !blocks.iter().any(|block| block.cid == blob.cid) {
                blocks.push(blob);
            }
        }
    };
    let mut builder = Builder::default();
    for chunk in data.chunks(CHUNK_BYTES) {
        keep(builder.push(chunk));
    }
    let (root, rest) = builder.finish();
    keep(rest);
    File { root, blocks }
}

/// Builds the same tree as [`file()`] from leaves fed one at a time, holding only the pending links
/// of each level (at most [`MAX_CHILDREN`] per level): a level that fills up gets its parent at
/// once; [`Builder::finish`] closes the partial groups from the bottom up.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    /// `levels[0]` pending leaves, `levels[1]` pending nodes over them, and so on.
    levels: Vec<Vec<Child>>,
    leaves: u64,
}

impl Builder {
    /// Adds the next chunk of the file (exactly [`CHUNK_BYTES`] unless it is the last); returns
    /// its raw leaf and any interior node it completed, children before parents.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Blob> {
        let cid = cid_v1_sha256(RAW, chunk);
        let mut blocks = vec![Blob { cid: Some(cid.to_string()), data: chunk.to_vec() }];
        self.leaves += 1;
        self.add(0, Child { cid, file_size: chunk.len() as u64, tsize: chunk.len() as u64 });
        let mut level = 0;
        while self.levels[level].len() == MAX_CHILDREN {
            let group = std::mem::take(&mut self.levels[level]);
            let parent = parent(&group, &mut blocks);
            self.add(level + 1, parent);
            level += 1;
        }
        blocks
    }

    /// Closes the tree: its root CID and the blocks not returned yet (the remaining interior
    /// nodes, or the empty leaf of an empty file).
    pub(crate) fn finish(mut self) -> (String, Vec<Blob>) {
        let mut blocks = if self.leaves == 0 { self.push(&[]) } else { Vec::new() };
        let mut level = 0;
        loop {
            let top = self.levels[level + 1..].iter().all(Vec::is_empty);
            let pending = std::mem::take(&mut self.levels[level]);
            if top && pending.len() == 1 {
                return (pending[0].cid.to_string(), blocks);
            }
            if !pending.is_empty() {
                let parent = parent(&pending, &mut blocks);
                self.add(level + 1, parent);
            }
            level += 1;
        }
    }

    fn add(&mut self, level: usize, child: Child) {
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, Vec::new);
        }
        self.levels[level].push(child);
    }
}

/// The dag-pb node over `group`, appended to `blocks`, as a child of the level above.
fn parent(group: &[Child], blocks: &mut Vec<Blob>) -> Child {
    let node = node(group);
    let cid = cid_v1_sha256(DAG_PB, &node);
    let child = Child {
        cid,
        file_size: group.iter().map(|child| child.file_size).sum(),
        tsize: node.len() as u64 + group.iter().map(|child| child.tsize).sum::<u64>(),
    };
    blocks.push(Blob { cid: Some(cid.to_string()), data: node });
    child
}

/// Appends `value` as a protobuf varint (base 128, low group first; the same bytes as a
/// multiformats unsigned varint, which is what the crate is named for).
fn varint(value: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(unsigned_varint::encode::u64(value, &mut unsigned_varint::encode::u64_buffer()));
}

fn field_bytes(field: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint(field << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn field_varint(field: u64, value: u64, out: &mut Vec<u8>) {
    varint(field << 3, out);
    varint(value, out);
}

/// A dag-pb node over `children`: links (Hash, empty Name, Tsize) then the UnixFS `Data`
/// (Type=File, filesize, one unpacked blocksizes entry per child).
fn node(children: &[Child]) -> Vec<u8> {
    let mut unixfs = Vec::new();
    field_varint(1, 2, &mut unixfs);
    field_varint(3, children.iter().map(|child| child.file_size).sum(), &mut unixfs);
    for child in children {
        field_varint(4, child.file_size, &mut unixfs);
    }
    let mut node = Vec::new();
    for child in children {
        let mut link = Vec::new();
        field_bytes(1, &child.cid.to_bytes(), &mut link);
        field_bytes(2, b"", &mut link);
        field_varint(3, child.tsize, &mut link);
        field_bytes(2, &link, &mut node);
    }
    field_bytes(1, &unixfs, &mut node);
    node
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn varints_are_protobuf_varints() {
        let encode = |value| {
            let mut out = Vec::new();
            varint(value, &mut out);
            out
        };
        // The protobuf documentation's example, and the full 64-bit range protobuf allows.
        assert_eq!(encode(0), [0x00]);
        assert_eq!(encode(300), [0xAC, 0x02]);
        assert_eq!(encode(u64::MAX), [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]);
    }

    /// The root-CID vectors of docs/hypermedia.md §3 (made with the pinned upstream importer).
    #[test]
    fn matches_the_upstream_importer() {
        let cases: [(Vec<u8>, &str, usize); 6] = [
            (Vec::new(), "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku", 1),
            (b"hello world".to_vec(), "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e", 1),
            (pattern(262_144), "bafkreibruh455iawsviqslif5c7uurdcfdemh22mtnytyzvnzn75kpejxy", 1),
            (pattern(262_145), "bafybeiexg2oqkfnj56l7fcmawswqbijt5shq4b5rg6a546uwpkqqzwjioi", 3),
            (pattern(1_000_000), "bafybeibx62obrkybp46hx3ivh53q4rnptgkunpgtwiib5lfelfgt2ekihm", 5),
            (pattern(45_875_200), "bafybeie73j3heycdgkdsehpoe6cxh2y3iywtf6djpi3dzqrywevvjmazny", 178),
        ];
        for (data, root, blocks) in cases {
            let file = file(&data);
            assert_eq!((file.root.as_str(), file.blocks.len()), (root, blocks), "{} bytes", data.len());
        }
    }

    /// The streaming builder, fed leaf by leaf, gives the vectors' roots, the same blocks in the
    /// same order as the batch layout of the level-by-level algorithm, and never holds more than
    /// one group per level.
    #[test]
    fn the_builder_streams_the_same_tree() {
        let cases = [
            (0, "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"),
            (262_144, "bafkreibruh455iawsviqslif5c7uurdcfdemh22mtnytyzvnzn75kpejxy"),
            (262_145, "bafybeiexg2oqkfnj56l7fcmawswqbijt5shq4b5rg6a546uwpkqqzwjioi"),
            (1_000_000, "bafybeibx62obrkybp46hx3ivh53q4rnptgkunpgtwiib5lfelfgt2ekihm"),
            (45_875_200, "bafybeie73j3heycdgkdsehpoe6cxh2y3iywtf6djpi3dzqrywevvjmazny"),
        ];
        for (len, root) in cases {
            let data = pattern(len);
            let mut builder = Builder::default();
            let mut blocks = Vec::new();
            for chunk in data.chunks(CHUNK_BYTES) {
                blocks.extend(builder.push(chunk));
                assert!(builder.levels.iter().all(|level| level.len() < MAX_CHILDREN));
            }
            let (streamed, rest) = builder.finish();
            blocks.extend(rest);
            assert_eq!(streamed, root, "{len} bytes");
            assert_eq!(blocks.last().and_then(|block| block.cid.as_deref()), Some(root), "root last");
            assert_eq!(blocks, file(&data).blocks, "{len} bytes");
        }
    }

    /// Deeper trees (a full group, one more leaf, a full second level) match the level-by-level
    /// layout, built here independently from leaf CIDs alone.
    #[test]
    fn the_builder_matches_level_by_level_grouping() {
        fn reference(leaves: &[Vec<u8>]) -> String {
            let mut level: Vec<Child> = leaves
                .iter()
                .map(|leaf| Child {
                    cid: cid_v1_sha256(RAW, leaf),
                    file_size: leaf.len() as u64,
                    tsize: leaf.len() as u64,
                })
                .collect();
            while level.len() > 1 {
                level = level.chunks(MAX_CHILDREN).map(|group| parent(group, &mut Vec::new())).collect();
            }
            level[0].cid.to_string()
        }
        // Tiny distinct leaves stand in for full chunks: the layout only depends on their count.
        for count in [2, 173, 174, 175, 348, 349, MAX_CHILDREN * MAX_CHILDREN, MAX_CHILDREN * MAX_CHILDREN + 1] {
            let leaves: Vec<Vec<u8>> = (0..count as u32).map(|i| i.to_le_bytes().to_vec()).collect();
            let mut builder = Builder::default();
            for leaf in &leaves {
                builder.push(leaf);
            }
            assert_eq!(builder.finish().0, reference(&leaves), "{count} leaves");
        }
    }
}
