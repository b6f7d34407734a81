use super::*;
use crate::record::budget::Budget;

const PAGE_WORDS: usize = PAGE / 8;

/// A mapped segment of `words` slots taken from `budget`.
fn segment(budget: &Budget, words: usize) -> *mut AtomicU64 {
    assert!(budget.try_take(segment_bytes(words)));
    alloc_mapped(words).expect("mmap")
}

/// A put segment is taken back (the smallest one that fits), its bytes
/// stay counted while pooled, and a closed pool keeps nothing.
#[test]
fn put_take_and_close_keep_the_budget_exact() {
    let budget = Budget::leaked(64 << 20);
    let pool = budget.pool();
    let a = segment(budget, PAGE_WORDS);
    assert!(!pool.put(a, PAGE_WORDS), "closed: the caller keeps it");
    pool.open(usize::MAX);
    assert!(pool.put(a, PAGE_WORDS));
    let b = segment(budget, 4 * PAGE_WORDS);
    assert!(pool.put(b, 4 * PAGE_WORDS));
    assert_eq!(pool.pooled_bytes(), segment_bytes(5 * PAGE_WORDS));
    assert_eq!(budget.used(), segment_bytes(5 * PAGE_WORDS));
    assert_eq!(
        pool.take(2 * PAGE_WORDS, 1 << 20),
        Some((b, 4 * PAGE_WORDS))
    );
    assert_eq!(pool.take(2 * PAGE_WORDS, 1 << 20), None, "none big enough");
    assert_eq!(pool.take(PAGE_WORDS, PAGE_WORDS), Some((a, PAGE_WORDS)));
    assert_eq!(pool.taken(), 2);
    assert!(pool.put(a, PAGE_WORDS));
    assert!(pool.put(b, 4 * PAGE_WORDS));
    assert_eq!(
        pool.take(PAGE_WORDS * 2, PAGE_WORDS * 2),
        None,
        "never above the most asked for"
    );
    pool.close();
    assert_eq!(pool.pooled_bytes(), 0);
    assert_eq!(budget.used(), 0, "every pooled byte given back at close");
    assert_eq!(pool.take(PAGE_WORDS, 1 << 20), None);
}

/// The pool never holds the last memory of the budget nor more than an
/// eighth of it, nor sizes outside its classes, nor more than `SLOTS`
/// per class.
#[test]
fn the_pool_keeps_within_its_bounds() {
    // An eighth of 1 MiB: 128 KiB.
    let budget = Budget::leaked(1 << 20);
    let pool = budget.pool();
    pool.open(usize::MAX);
    let big = 16 * PAGE_WORDS; // 64 KiB
    let a = segment(budget, big);
    let b = segment(budget, big);
    let c = segment(budget, big);
    assert!(pool.put(a, big));
    assert!(pool.put(b, big));
    assert!(!pool.put(c, big), "over an eighth of the budget");
    pool.close();
    // SAFETY: `c` was mapped above and is not pooled.
    unsafe { free_mapped(c, big) };
    budget.give_back(segment_bytes(big));
    assert_eq!(budget.used(), 0);

    let budget = Budget::leaked(64 << 20);
    let pool = budget.pool();
    pool.open(usize::MAX);
    let segs: Vec<_> = (0..3).map(|_| segment(budget, PAGE_WORDS)).collect();
    assert!(pool.put(segs[0], PAGE_WORDS));
    assert!(pool.put(segs[1], PAGE_WORDS));
    assert!(!pool.put(segs[2], PAGE_WORDS), "two per class");
    let huge = 2 * (POOL_MAX_BYTES / 8);
    let h = segment(budget, huge);
    assert!(!pool.put(h, huge), "huge-page sizes are not pooled");
    // The budget with less than the segment free after it.
    budget.set_limit(budget.used() + segment_bytes(PAGE_WORDS) - 8);
    pool.take(PAGE_WORDS, PAGE_WORDS).unwrap();
    assert!(!pool.put(segs[0], PAGE_WORDS), "the last memory");
    pool.close();
    for (base, words) in [(segs[0], PAGE_WORDS), (segs[2], PAGE_WORDS), (h, huge)] {
        // SAFETY: mapped above, not pooled, freed once.
        unsafe { free_mapped(base, words) };
        budget.give_back(segment_bytes(words));
    }
    assert_eq!(budget.used(), 0);
}

/// Stocking maps one segment per class in, smallest first, within an
/// eighth of the budget and while as much again stays free; trimming
/// gives back what was not taken for a second, the stock excepted.
#[test]
fn stock_and_trim() {
    let budget = Budget::leaked(4 << 20); // an eighth: 512 KiB
    let pool = budget.pool();
    assert_eq!(pool.stock(), 0, "closed");
    pool.open(usize::MAX);
    let stocked = pool.stock();
    // 4 + 16 + 64 + 256 KiB; 1 MiB would pass the eighth.
    assert_eq!(stocked, (4 + 16 + 64 + 256) << 10);
    assert_eq!(budget.used(), stocked);
    assert_eq!(pool.stock(), 0, "stocked already");
    let (base, words) = pool.take(PAGE_WORDS, PAGE_WORDS).unwrap();
    assert_eq!(pool.stock(), segment_bytes(PAGE_WORDS), "restocked");
    assert!(pool.put(base, words), "a second 4 KiB");
    assert_eq!(pool.trim(), 0, "not idle yet");
    let later = now_ms() + POOL_IDLE_MS;
    assert_eq!(pool.trim_at(later), 1, "the second 4 KiB");
    assert_eq!(budget.used(), stocked, "the stock is kept");

    // The stock too, once no ring was made or grew for STOCK_IDLE_MS.
    pool.touch();
    let touched = now_ms();
    assert_eq!(
        pool.trim_at(touched + STOCK_IDLE_MS - 2),
        0,
        "a ring grew within STOCK_IDLE_MS"
    );
    assert_eq!(pool.trim_at(touched + STOCK_IDLE_MS + 2), 4);
    assert_eq!(pool.pooled_bytes(), 0);
    assert_eq!(budget.used(), 0, "an idle process holds no stock");
    pool.close();

    // Rings of 64 KiB at most: nothing bigger is stocked.
    let budget = Budget::leaked(32 << 20);
    let pool = budget.pool();
    pool.open(64 << 10 >> 3);
    assert_eq!(pool.stock(), (4 + 16 + 64) << 10);
    pool.close();
    assert_eq!(budget.used(), 0);
}

/// `trim` skips its scan until the earliest time a slot can be idle,
/// and a segment put after a scan lowers that time: it is still given
/// back POOL_IDLE_MS after it was put, not at the scan's later guess.
#[test]
fn trim_scans_from_the_earliest_idle_time_a_put_included() {
    let budget = Budget::leaked(4 << 20);
    let pool = budget.pool();
    pool.open(usize::MAX);
    pool.stock();
    let t0 = now_ms();
    // A scan an hour ahead: the stock goes, and the empty pool's next
    // scan is set an hour ahead too.
    assert_eq!(pool.trim_at(t0 + 3600 * 1000), 4);
    assert_eq!(pool.pooled_bytes(), 0);
    let seg = segment(budget, PAGE_WORDS);
    assert!(pool.put(seg, PAGE_WORDS));
    let seg = segment(budget, PAGE_WORDS);
    assert!(pool.put(seg, PAGE_WORDS), "a second 4 KiB");
    let put_at = now_ms();
    assert_eq!(pool.trim_at(put_at), 0, "not idle yet");
    assert_eq!(
        pool.trim_at(put_at + POOL_IDLE_MS + 2),
        1,
        "the second 4 KiB, idle a second after it was put"
    );
    assert_eq!(
        pool.pooled_bytes(),
        segment_bytes(PAGE_WORDS),
        "the stock slot stays"
    );
    pool.close();
    assert_eq!(budget.used(), 0);
}
