//! Interning: a sequence's iids of call-site names, categories, argument
//! names and source locations, and the `InternedData` entries that define
//! them, written in the packet that first uses each one. Kept per call site
//! id (a lookup by index, no hashing per event); names shared by several
//! sites are looked up by string once per site. All of it is forgotten at a
//! sequence reset (`Seq::clear_interning`).

use super::fields::{
    ENTRY_IID, ENTRY_NAME, ID_DEBUG_ANNOTATION_NAMES, ID_EVENT_CATEGORIES, ID_EVENT_NAMES,
    ID_SOURCE_LOCATIONS, SL_FILE_NAME, SL_FUNCTION_NAME, SL_LINE_NUMBER,
};
use super::Seq;
use crate::encode::protowire::{nested, string, uint};
use crate::record::callsite::Callsite;

pub(super) fn intern_name(seq: &mut Seq, cs: &Callsite, interned: &mut Vec<u8>) -> u32 {
    let idx = cs.id() as usize;
    if seq.name_iids.len() <= idx {
        seq.name_iids.resize(idx + 1, 0);
    }
    if seq.name_iids[idx] == 0 {
        let iid = seq.next_name_iid;
        seq.next_name_iid += 1;
        seq.name_iids[idx] = iid;
        intern_entry(interned, ID_EVENT_NAMES, iid, cs.name);
    }
    seq.name_iids[idx]
}

pub(super) fn intern_category(seq: &mut Seq, cs: &Callsite, interned: &mut Vec<u8>) -> u32 {
    let idx = cs.id() as usize;
    match seq.site_cat_iids.get(idx) {
        Some(&iid) if iid != 0 => iid,
        _ => {
            let iid = intern_category_name(seq, cs, interned);
            if seq.site_cat_iids.len() <= idx {
                seq.site_cat_iids.resize(idx + 1, 0);
            }
            seq.site_cat_iids[idx] = iid;
            iid
        }
    }
}

fn intern_category_name(seq: &mut Seq, cs: &Callsite, interned: &mut Vec<u8>) -> u32 {
    if let Some(&iid) = seq.cat_iids.get(cs.category) {
        return iid;
    }
    let iid = seq.next_cat_iid;
    seq.next_cat_iid += 1;
    seq.cat_iids.insert(cs.category, iid);
    intern_entry(interned, ID_EVENT_CATEGORIES, iid, cs.category);
    iid
}

pub(super) fn intern_annotation_name(
    seq: &mut Seq,
    name: &'static str,
    interned: &mut Vec<u8>,
) -> u32 {
    if let Some(&iid) = seq.ann_iids.get(name) {
        return iid;
    }
    let iid = seq.next_ann_iid;
    seq.next_ann_iid += 1;
    seq.ann_iids.insert(name, iid);
    intern_entry(interned, ID_DEBUG_ANNOTATION_NAMES, iid, name);
    iid
}

pub(super) fn intern_location(seq: &mut Seq, cs: &Callsite, interned: &mut Vec<u8>) -> u32 {
    let idx = cs.id() as usize;
    if seq.loc_iids.len() <= idx {
        seq.loc_iids.resize(idx + 1, 0);
    }
    if seq.loc_iids[idx] == 0 {
        let iid = seq.next_loc_iid;
        seq.next_loc_iid += 1;
        seq.loc_iids[idx] = iid;
        nested(interned, ID_SOURCE_LOCATIONS, |sl| {
            uint(sl, ENTRY_IID, iid as u64);
            string(sl, SL_FILE_NAME, cs.file);
            string(sl, SL_FUNCTION_NAME, cs.module);
            uint(sl, SL_LINE_NUMBER, cs.line as u64);
        });
    }
    seq.loc_iids[idx]
}

fn intern_entry(interned: &mut Vec<u8>, field: u32, iid: u32, name: &str) {
    nested(interned, field, |e| {
        uint(e, ENTRY_IID, iid as u64);
        string(e, ENTRY_NAME, name);
    });
}
