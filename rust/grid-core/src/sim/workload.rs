//! What each simulated site publishes, shaped like what a real site's engine publishes
//! (`python/grid/crdt/`): its certificate in chunks (`cert` lane), its gateway and its
//! metadata (one item each), one catalogue item per provider (`provider/<name>`, `state`
//! lane) and its providers' signals in pages (`signals-page/<n>`), every page written again
//! at each scrape, as the signals of every provider move then.
//!
//! The payloads have the sizes of the real encodings, not their content: the driver, its
//! store and the wire treat a payload as opaque bytes, so only its length changes what they
//! do. Each payload spells its site, key and version, so two versions never look alike.

use std::time::Duration;

use crate::lanes::Lane;

/// What one site publishes, and how often its signals move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteLoad {
    pub providers: usize,
    /// A provider's catalogue item: about 450 bytes at 100 providers a site.
    pub provider_bytes: usize,
    /// The certificate's chunks (`cert/<i>`): a site certificate's PEM is cut every 640
    /// characters, each chunk with its JSON fields around it.
    pub certificate_chunk_bytes: Vec<usize>,
    pub gateway_bytes: usize,
    pub metadata_bytes: usize,
    /// Signals registers one page holds, and the bytes of each (name, version, offset and
    /// the six signals as JSON): a page stays under the 1,024-byte item limit.
    pub registers_per_page: usize,
    pub register_bytes: usize,
    /// Every provider's signals move, and every page is written again, this often.
    pub scrape_interval: Duration,
}

impl Default for SiteLoad {
    fn default() -> SiteLoad {
        SiteLoad {
            providers: 100,
            provider_bytes: 450,
            certificate_chunk_bytes: vec![800, 220],
            gateway_bytes: 250,
            metadata_bytes: 200,
            registers_per_page: 12,
            register_bytes: 70,
            scrape_interval: Duration::from_secs(15),
        }
    }
}

/// One item a site publishes, without its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadItem {
    pub lane: Lane,
    pub key: String,
    pub bytes: usize,
}

/// The bytes of a page's header: format byte, brackets, the revision and the site tag.
const PAGE_HEADER_BYTES: usize = 32;

impl SiteLoad {
    pub fn pages(&self) -> usize {
        self.providers.div_ceil(self.registers_per_page.max(1))
    }

    /// Item names one site publishes.
    pub fn items_per_site(&self) -> usize {
        self.certificate_chunk_bytes.len() + 2 + self.providers + self.pages()
    }

    /// Everything a site publishes once, when it starts: certificate, gateway, metadata,
    /// catalogue and pages.
    pub fn site_items(&self) -> Vec<LoadItem> {
        let mut items = Vec::with_capacity(self.items_per_site());
        for (index, &bytes) in self.certificate_chunk_bytes.iter().enumerate() {
            items.push(LoadItem {
                lane: Lane::Cert,
                key: format!("cert/{index}"),
                bytes,
            });
        }
        items.push(LoadItem {
            lane: Lane::Gateway,
            key: "gateway".to_owned(),
            bytes: self.gateway_bytes,
        });
        items.push(LoadItem {
            lane: Lane::Metadata,
            key: "metadata".to_owned(),
            bytes: self.metadata_bytes,
        });
        items.extend((0..self.providers).map(|index| self.provider_item(index)));
        items.extend(self.page_items());
        items
    }

    pub fn provider_item(&self, index: usize) -> LoadItem {
        LoadItem {
            lane: Lane::State,
            key: format!("provider/p{index}"),
            bytes: self.provider_bytes,
        }
    }

    /// The signals pages, each as full as the providers allow.
    pub fn page_items(&self) -> Vec<LoadItem> {
        let per_page = self.registers_per_page.max(1);
        (0..self.pages())
            .map(|page| {
                let registers = per_page.min(self.providers - page * per_page);
                LoadItem {
                    lane: Lane::State,
                    key: format!("signals-page/{page}"),
                    bytes: PAGE_HEADER_BYTES + registers * self.register_bytes,
                }
            })
            .collect()
    }
}

/// A payload of `bytes` bytes naming its site, key and version, repeated.
pub fn payload(site: &str, key: &str, version: u64, bytes: usize) -> Vec<u8> {
    let stamp = format!("{site}/{key}@{version};");
    stamp.bytes().cycle().take(bytes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::{encoded_item_len, MAX_ITEM_LEN};

    #[test]
    fn a_site_of_a_hundred_providers_publishes_its_heads_catalogue_and_pages() {
        let load = SiteLoad::default();
        let items = load.site_items();
        assert_eq!(load.pages(), 9);
        assert_eq!(items.len(), load.items_per_site());
        assert_eq!(items.len(), 2 + 2 + 100 + 9);
        let last_page = items.last().unwrap();
        assert_eq!(last_page.key, "signals-page/8");
        assert_eq!(last_page.bytes, PAGE_HEADER_BYTES + 4 * 70);
    }

    #[test]
    fn every_item_fits_the_item_limit() {
        let load = SiteLoad::default();
        for item in load.site_items() {
            let len = encoded_item_len("n99999", &item.key, &vec![0; item.bytes]);
            assert!(len <= MAX_ITEM_LEN, "{item:?} encodes to {len} bytes");
        }
    }

    #[test]
    fn payloads_have_the_size_asked_and_differ_by_version() {
        let one = payload("n1", "provider/p0", 1, 450);
        assert_eq!(one.len(), 450);
        assert_ne!(one, payload("n1", "provider/p0", 2, 450));
    }
}
