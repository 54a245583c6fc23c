//! FNV-1a, 32 bits: the hash behind an overlay candidate's `stable_id`.

pub const OFFSET_BASIS: u32 = 2_166_136_261;
pub const PRIME: u32 = 16_777_619;

/// FNV-1a over the concatenation of `parts`.
pub fn fnv1a_32<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    parts
        .into_iter()
        .flatten()
        .fold(OFFSET_BASIS, |hash, &byte| {
            (hash ^ u32::from(byte)).wrapping_mul(PRIME)
        })
}

/// A candidate's `stable_id`: FNV-1a over the UTF-8 of `kind/name/site/cluster`, as 8
/// lowercase hex digits.
pub fn stable_id(kind: &str, name: &str, site: &str, cluster: &str) -> String {
    let hash = fnv1a_32([
        kind.as_bytes(),
        b"/",
        name.as_bytes(),
        b"/",
        site.as_bytes(),
        b"/",
        cluster.as_bytes(),
    ]);
    format!("{hash:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a_32([&b""[..]]), 0x811c_9dc5);
        assert_eq!(fnv1a_32([&b"a"[..]]), 0xe40c_292c);
        assert_eq!(fnv1a_32([&b"foobar"[..]]), 0xbf9c_f968);
        assert_eq!(fnv1a_32([&b"foo"[..], b"bar"]), 0xbf9c_f968);
    }

    #[test]
    fn stable_id_hashes_the_joined_path() {
        let joined = fnv1a_32([&b"inference_model/llama/east/vllm"[..]]);
        assert_eq!(
            stable_id("inference_model", "llama", "east", "vllm"),
            format!("{joined:08x}")
        );
        assert_ne!(
            stable_id("inference_model", "llama", "east", "vllm"),
            stable_id("inference_model", "llama", "east", "vllm2")
        );
    }
}
