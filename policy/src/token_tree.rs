//! A trie of token sequences, laid out as the spans of a [`crate::fused::TreeShape`]: what the learner
//! forwards when several samples share tokens.
//!
//! Why: the samples of a training group share their prompt, and an agent that writes the same program as
//! its neighbours reads the same tool output, so their sequences agree far past the prompt. A token's
//! hidden state depends only on the tokens before it, so every shared token is computed once: the trie's
//! nodes are the distinct prefixes, each sequence a path from a root. Runs of nodes with one child are one
//! span; spans are laid out depth first, each after its
//! parent, so [`crate::fused::tree_attention`] reads a span's ancestors as its keys.

use crate::fused::TreeSpan;

/// The trie of some token sequences, as rows.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenTree {
    /// The spans, in row order, each after its parent.
    pub spans: Vec<TreeSpan>,
    /// The token of every row.
    pub tokens: Vec<u32>,
    /// For each sequence, the row of each of its tokens.
    pub rows: Vec<Vec<u32>>,
}

/// A trie node: one token after its parent's prefix.
struct Node {
    token: u32,
    children: Vec<usize>,
}

impl TokenTree {
    /// The trie of `seqs` (each non-empty).
    pub fn build(seqs: &[&[u32]]) -> TokenTree {
        // Nodes 0.. are tokens; `roots` are the first tokens' nodes.
        let mut nodes: Vec<Node> = Vec::new();
        let mut roots: Vec<usize> = Vec::new();
        let mut paths: Vec<Vec<usize>> = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let mut path = Vec::with_capacity(seq.len());
            let mut parent: Option<usize> = None;
            for &token in seq.iter() {
                let siblings = match parent {
                    None => &roots,
                    Some(p) => &nodes[p].children,
                };
                let found = siblings.iter().copied().find(|&c| nodes[c].token == token);
                let node = match found {
                    Some(c) => c,
                    None => {
                        nodes.push(Node { token, children: Vec::new() });
                        let id = nodes.len() - 1;
                        match parent {
                            None => roots.push(id),
                            Some(p) => nodes[p].children.push(id),
                        }
                        id
                    }
                };
                path.push(node);
                parent = Some(node);
            }
            paths.push(path);
        }
        // Lay the spans out depth first: a span runs while its node has exactly one child.
        let mut spans: Vec<TreeSpan> = Vec::new();
        let mut tokens: Vec<u32> = Vec::with_capacity(nodes.len());
        let mut row_of = vec![0u32; nodes.len()];
        // (first node of a span, the span it continues)
        let mut stack: Vec<(usize, Option<usize>)> = roots.iter().rev().map(|&r| (r, None)).collect();
        while let Some((first, parent)) = stack.pop() {
            let span = spans.len();
            let mut node = first;
            let mut rows = 0;
            loop {
                row_of[node] = tokens.len() as u32;
                tokens.push(nodes[node].token);
                rows += 1;
                match nodes[node].children.as_slice() {
                    [only] => node = *only,
                    children => {
                        stack.extend(children.iter().rev().map(|&c| (c, Some(span))));
                        break;
                    }
                }
            }
            spans.push(TreeSpan { parent, rows });
        }
        let rows = paths.into_iter().map(|p| p.into_iter().map(|n| row_of[n]).collect()).collect();
        TokenTree { spans, tokens, rows }
    }

    /// Rows in all.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether it holds no row.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::TreeShape;

    #[test]
    fn shared_prefixes_are_rows_once_and_every_sequence_reads_its_own_path() {
        let a = [1, 2, 3, 4, 5];
        let b = [1, 2, 3, 9, 9, 9];
        let c = [1, 2, 3, 4, 5, 6];
        let d = [7, 8];
        let tree = TokenTree::build(&[&a, &b, &c, &d]);
        // Rows: [1 2 3] [4 5 6] [9 9 9] [7 8]: 11 rows for 19 tokens (a is the start of c's path).
        assert_eq!(tree.len(), 11);
        assert_eq!(
            tree.spans,
            vec![
                TreeSpan { parent: None, rows: 3 },
                TreeSpan { parent: Some(0), rows: 3 },
                TreeSpan { parent: Some(0), rows: 3 },
                TreeSpan { parent: None, rows: 2 },
            ]
        );
        let shape = TreeShape::new(tree.spans.clone(), 1, 1, 2).unwrap();
        let positions = shape.positions();
        for (seq, rows) in [&a[..], &b, &c, &d].iter().zip(&tree.rows) {
            assert_eq!(rows.len(), seq.len());
            for (t, (&token, &row)) in seq.iter().zip(rows).enumerate() {
                assert_eq!(tree.tokens[row as usize], token, "the row holds the token");
                assert_eq!(positions[row as usize] as usize, t, "the row sits at the token's position");
            }
        }
        // A sequence that is another's prefix reads the first rows of the other's path.
        let tree = TokenTree::build(&[&[1, 2], &[1, 2, 3]]);
        assert_eq!(tree.spans, vec![TreeSpan { parent: None, rows: 3 }]);
        assert_eq!(tree.rows, vec![vec![0, 1], vec![0, 1, 2]]);
    }
}
