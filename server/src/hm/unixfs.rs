//! Bytes as UnixFS blocks, the way the upstream importer lays them out with its defaults
//! (HM-INTEGRATION.md §3): 256 KiB fixed-size chunks as raw leaves (CIDv1 raw sha2-256); a file
//! of one chunk is that leaf; otherwise a balanced tree of dag-pb nodes with at most 174 links,
//! built level by level (a trailing group of one still gets its own parent).

use super::blob::{Blob, DAG_PB, RAW, cid_string, cid_v1_sha256};

/// Bytes per leaf.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Links per interior node.
pub const MAX_CHILDREN: usize = 174;

/// The blocks of a file and its root CID string.
#[derive(Debug, Clone)]
pub struct File {
    /// The root CID (`ipfs://<root>` names the file).
    pub root: String,
    /// Every unique block, leaves first.
    pub blocks: Vec<Blob>,
}

struct Child {
    cid: Vec<u8>,
    /// Bytes of file content below (a leaf's length, a node's filesize).
    file_size: u64,
    /// Cumulative encoded size (a leaf's length; a node's length plus its links' Tsize).
    tsize: u64,
}

/// Splits `data` into UnixFS blocks.
pub fn file(data: &[u8]) -> File {
    let mut blocks: Vec<Blob> = Vec::new();
    let mut push = |cid: &[u8], bytes: Vec<u8>| {
        let cid = cid_string(cid);
        if !blocks.iter().any(|block| block.cid.as_deref() == Some(cid.as_str())) {
            blocks.push(Blob { cid: Some(cid), data: bytes });
        }
    };
    let chunks: Vec<&[u8]> = if data.is_empty() { vec![data] } else { data.chunks(CHUNK_BYTES).collect() };
    let mut level: Vec<Child> = chunks
        .into_iter()
        .map(|chunk| {
            let cid = cid_v1_sha256(RAW, chunk);
            push(&cid, chunk.to_vec());
            Child { cid, file_size: chunk.len() as u64, tsize: chunk.len() as u64 }
        })
        .collect();
    if level.len() > 1 {
        loop {
            level = level
                .chunks(MAX_CHILDREN)
                .map(|group| {
                    let node = node(group);
                    let cid = cid_v1_sha256(DAG_PB, &node);
                    let child = Child {
                        cid: cid.clone(),
                        file_size: group.iter().map(|child| child.file_size).sum(),
                        tsize: node.len() as u64 + group.iter().map(|child| child.tsize).sum::<u64>(),
                    };
                    push(&cid, node);
                    child
                })
                .collect();
            if level.len() == 1 {
                break;
            }
        }
    }
    File { root: cid_string(&level[0].cid), blocks }
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
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
        field_bytes(1, &child.cid, &mut link);
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

    /// The root-CID vectors of HM-INTEGRATION.md §3 (made with the pinned upstream importer).
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
}
