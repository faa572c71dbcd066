//! The tree a new image will hold, in memory: every entry's attributes and
//! where its data is, no file contents. It starts as an existing image's
//! tree ([`Tree::from_image`]) and is then changed (entries added, replaced
//! and removed) before [`super::Appender::finish`] writes it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::reader::file::SIZE_MASK;
use crate::reader::{Body, Error, Image, InodeRef, Kind, Result};

/// A node's index in its tree.
pub type NodeId = usize;

/// The deepest directory nesting a tree may have (a path of 4096 bytes
/// holds at most 2048 components).
pub const MAX_DEPTH: usize = 2048;
/// The most block size words kept for an image's files (256 MiB): a
/// crafted image could otherwise have many inodes share one huge block
/// list.
const MAX_WORDS: usize = 1 << 26;
/// The most bytes of distinct xattr sets kept for an image.
const MAX_XATTR_BYTES: usize = 64 << 20;

/// Extended attributes: full names (with their `user.`, `trusted.` or
/// `security.` prefix) and values.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// An entry's attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs {
    /// Permission bits (with setuid, setgid, sticky).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds.
    pub mtime: u32,
    /// Extended attributes (shared by the entries that have the same set).
    pub xattrs: Arc<Xattrs>,
}

/// Where a regular file's data is in the image being written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileData {
    /// Its size in bytes.
    pub size: u64,
    /// Where its first block is.
    pub start: u64,
    /// Its blocks' size words (bit 24: stored uncompressed; 0: a hole).
    pub words: Vec<u32>,
    /// Its tail end: fragment index and offset in that fragment.
    pub fragment: Option<(u32, u32)>,
    /// Bytes of it that are holes.
    pub sparse: u64,
}

/// What a node is.
#[derive(Debug, Clone)]
pub enum Content {
    /// A directory and its entries.
    Dir(BTreeMap<Box<[u8]>, NodeId>),
    /// A regular file.
    File(FileData),
    /// A symbolic link and its target.
    Symlink(Vec<u8>),
    /// A block device and its number (the kernel's new encoding).
    BlockDev(u32),
    /// A character device and its number.
    CharDev(u32),
    /// A named pipe.
    Fifo,
    /// A socket.
    Socket,
}

/// An entry of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its attributes.
    pub attrs: Attrs,
    /// What it is.
    pub content: Content,
    /// The layer it came from: 0 for the image, more for changes on top.
    pub layer: u32,
}

impl Node {
    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self.content, Content::Dir(_))
    }
}

/// A tree of nodes; node 0 is the root directory.
#[derive(Debug)]
pub struct Tree {
    nodes: Vec<Node>,
    /// Bytes of data blocks the image's files hold (each file once).
    image_data: u64,
}

impl Tree {
    /// An empty tree: a root directory with `attrs`.
    pub fn new(attrs: Attrs) -> Self {
        Tree {
            nodes: vec![Node {
                attrs,
                content: Content::Dir(BTreeMap::new()),
                layer: 0,
            }],
            image_data: 0,
        }
    }

    /// The root directory.
    pub fn root(&self) -> NodeId {
        0
    }

    /// Node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Node `id`, to change.
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id]
    }

    /// Adds `node` (not yet in any directory).
    pub fn add(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Nodes in the tree, reachable or not.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree has only its root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// The entries of directory `dir`, to change; `None` if it is not one.
    pub fn entries_mut(&mut self, dir: NodeId) -> Option<&mut BTreeMap<Box<[u8]>, NodeId>> {
        match &mut self.nodes[dir].content {
            Content::Dir(e) => Some(e),
            _ => None,
        }
    }

    /// The entries of directory `dir`; `None` if it is not one.
    pub fn entries(&self, dir: NodeId) -> Option<&BTreeMap<Box<[u8]>, NodeId>> {
        match &self.nodes[dir].content {
            Content::Dir(e) => Some(e),
            _ => None,
        }
    }

    /// Entry `name` of directory `dir`.
    pub fn child(&self, dir: NodeId, name: &[u8]) -> Option<NodeId> {
        match &self.nodes[dir].content {
            Content::Dir(e) => e.get(name).copied(),
            _ => None,
        }
    }

    /// Bytes of the image's file data that no reachable file uses any
    /// more (what the new image carries along unused).
    pub fn unused_image_data(&self) -> u64 {
        // Files with the same blocks (mksquashfs stores duplicates once)
        // count once.
        let mut seen = HashSet::new();
        let mut live = 0u64;
        let mut todo = vec![self.root()];
        while let Some(id) = todo.pop() {
            match &self.nodes[id].content {
                Content::Dir(e) => todo.extend(e.values().copied()),
                Content::File(f)
                    if self.nodes[id].layer == 0 && seen.insert((f.start, f.words.len())) =>
                {
                    live += stored(&f.words);
                }
                _ => {}
            }
        }
        self.image_data.saturating_sub(live)
    }

    /// The tree of `image`: every entry, hard links as one node, files'
    /// data where the image has it (for a copy of the image's data that
    /// keeps every position). Data outside `[0, data_end)` is refused.
    pub fn from_image(image: &Image) -> Result<Tree> {
        let sb = image.superblock();
        let data_end = sb.inode_table;
        let root_ref = image.root();
        let root = image.inode(root_ref)?;
        let mut xattrs: HashMap<u32, Arc<Xattrs>> = HashMap::new();
        let mut xattr_bytes = 0usize;
        let mut attrs_of = |i: &crate::reader::Inode| -> Result<Attrs> {
            let x = match i.xattr {
                None => Arc::default(),
                Some(idx) => match xattrs.get(&idx) {
                    Some(x) => x.clone(),
                    None => {
                        let x = image.xattrs(idx)?;
                        xattr_bytes += x.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
                        if xattr_bytes > MAX_XATTR_BYTES {
                            return Err(Error::Unsupported(
                                "more xattrs than berth's writer keeps".into(),
                            ));
                        }
                        let x = Arc::new(x);
                        xattrs.insert(idx, x.clone());
                        x
                    }
                },
            };
            Ok(Attrs {
                perm: i.perm & 0o7777,
                uid: i.uid,
                gid: i.gid,
                mtime: i.mtime,
                xattrs: x,
            })
        };
        if root.kind != Kind::Dir {
            return Err(Error::Corrupt("the root is not a directory".into()));
        }
        let mut tree = Tree::new(attrs_of(&root)?);
        let mut dirs_seen: HashSet<InodeRef> = HashSet::from([root_ref]);
        // Every entry of one inode is one node (hard links, or a crafted
        // image's many names for one inode).
        let mut nodes: HashMap<InodeRef, NodeId> = HashMap::new();
        let mut blocks_seen: HashSet<(u64, usize)> = HashSet::new();
        let mut words_kept = 0usize;
        let mut todo = vec![(tree.root(), root_ref, root, 0usize)];
        while let Some((dir_id, dir_ref, dir, depth)) = todo.pop() {
            if depth >= MAX_DEPTH {
                return Err(Error::Unsupported(format!(
                    "directories nested deeper than {MAX_DEPTH}"
                )));
            }
            for e in &image.listing(dir_ref, &dir)?.entries {
                if let Some(&id) = nodes.get(&e.inode) {
                    tree.entries_mut(dir_id)
                        .ok_or_else(|| Error::Corrupt("a directory changed".into()))?
                        .insert(e.name.clone(), id);
                    continue;
                }
                let i = image.inode(e.inode)?;
                let attrs = attrs_of(&i)?;
                let content = match (&i.body, i.kind) {
                    (Body::Dir(_), _) => {
                        if !dirs_seen.insert(e.inode) {
                            return Err(Error::Corrupt(format!(
                                "directory {:?} appears twice (a loop)",
                                String::from_utf8_lossy(&e.name)
                            )));
                        }
                        Content::Dir(BTreeMap::new())
                    }
                    (Body::File(f), _) => {
                        let words = image.block_words(e.inode, f)?;
                        words_kept += words.len();
                        if words_kept > MAX_WORDS {
                            return Err(Error::Unsupported(
                                "more data blocks than berth's writer keeps".into(),
                            ));
                        }
                        let end = f.blocks_start.saturating_add(stored(&words));
                        if end > data_end {
                            return Err(Error::Unsupported(
                                "a file's blocks lie after the inode table".into(),
                            ));
                        }
                        if let Some((index, offset)) = f.fragment {
                            if index >= sb.frag_count || offset >= sb.block_size {
                                return Err(Error::Corrupt(format!(
                                    "a file's tail in fragment {index} at {offset}"
                                )));
                            }
                        }
                        if blocks_seen.insert((f.blocks_start, words.len())) {
                            tree.image_data += stored(&words);
                        }
                        Content::File(FileData {
                            size: i.size,
                            start: f.blocks_start,
                            words,
                            fragment: f.fragment,
                            sparse: f.sparse,
                        })
                    }
                    (Body::Symlink(t), _) => Content::Symlink(t.clone()),
                    (Body::Device(d), Kind::BlockDev) => Content::BlockDev(*d),
                    (Body::Device(d), _) => Content::CharDev(*d),
                    (Body::Plain, Kind::Socket) => Content::Socket,
                    (Body::Plain, _) => Content::Fifo,
                };
                let is_dir = matches!(content, Content::Dir(_));
                let id = tree.add(Node {
                    attrs,
                    content,
                    layer: 0,
                });
                tree.entries_mut(dir_id)
                    .ok_or_else(|| Error::Corrupt("a directory changed".into()))?
                    .insert(e.name.clone(), id);
                if is_dir {
                    todo.push((id, e.inode, i, depth + 1));
                } else {
                    nodes.insert(e.inode, id);
                }
            }
        }
        Ok(tree)
    }
}

/// The bytes the blocks of `words` take in the image.
pub fn stored(words: &[u32]) -> u64 {
    words.iter().map(|w| u64::from(w & SIZE_MASK)).sum()
}
