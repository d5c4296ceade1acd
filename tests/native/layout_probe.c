/* Prints the region layout as the C compiler sees it; test_region_layout.py compares it with
 * nodeagent/region.py. */
#include <stdio.h>

#include "region.h"

#define OFF(type, field) printf("%s.%s %zu\n", #type, #field, offsetof(type, field))

int main(void) {
    printf("sizeof.region %zu\nsizeof.device %zu\nsizeof.slot %zu\n", sizeof(tr_region_t),
           sizeof(tr_device_t), sizeof(tr_slot_t));
    printf("const.magic %u\nconst.major %u\nconst.max_devices %d\nconst.max_slots %d\n",
           TR_REGION_MAGIC, TR_REGION_MAJOR, TR_MAX_DEVICES, TR_MAX_SLOTS);
    printf("const.lock_base %lld\n", (long long)TR_LOCK_BASE);
    OFF(tr_region_t, magic); OFF(tr_region_t, major); OFF(tr_region_t, minor);
    OFF(tr_region_t, header_size); OFF(tr_region_t, device_count); OFF(tr_region_t, slot_count);
    OFF(tr_region_t, created_ns); OFF(tr_region_t, claim); OFF(tr_region_t, devices);
    OFF(tr_region_t, slots);
    OFF(tr_device_t, uuid); OFF(tr_device_t, mem_limit); OFF(tr_device_t, mem_used);
    OFF(tr_device_t, mem_rejected); OFF(tr_device_t, mem_peak); OFF(tr_device_t, compute_percent);
    OFF(tr_device_t, tokens_ns); OFF(tr_device_t, last_refill_ns);
    OFF(tr_device_t, compute_used_ns); OFF(tr_device_t, throttled_ns); OFF(tr_device_t, launches);
    OFF(tr_slot_t, pid); OFF(tr_slot_t, generation); OFF(tr_slot_t, start_time);
    OFF(tr_slot_t, pid_ns);
    OFF(tr_slot_t, mem_used);
    return 0;
}
