"""Reading cuobjdump's listing: registers, spills, and the K loop found by its back branch."""

from kernelaudit.repro.sass import parse

USAGE = "Function lane_sums_kernel:\n REG:137 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:440 TEXTURE:0\n"
LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;            /* 0x00000a0000017a02 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;  /* 0x0000000402047981 */
        /*0020*/                   LDS.128 R8, [R0] ;                /* 0x0000000000087984 */
        /*0030*/                   FFMA R12, R8, R4, R12 ;           /* 0x000000040c0c7223 */
        /*0040*/               @P0 FFMA R13, R9, R4, R13 ;           /* 0x000000040d0d7223 */
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;     /* 0x0000000000007b1d */
        /*0060*/              @!P1 BRA 0x20 ;                        /* 0x0000000000008947 */
        /*0070*/                   STG.E [R2.64], R12 ;              /* 0x0000000c02007986 */
        /*0080*/                   EXIT ;                            /* 0x000000000000794d */
        /*0090*/                   BRA 0x90;                         /* 0xfffffff000007947 */
"""


def test_parse_reads_registers_stack_and_predicated_opcodes_with_modifiers():
    s = parse(USAGE, LISTING)
    assert (s.registers, s.stack_bytes) == (137, 0)
    assert s.opcodes() == ["MOV", "LDG.E.128", "LDS.128", "FFMA", "FFMA", "BAR.SYNC.DEFER_BLOCKING", "BRA", "STG.E",
                           "EXIT", "BRA"]
    assert s.counts()["FFMA"] == 2 and s.ffma_share() == 0.2


def test_main_loop_is_the_longest_backward_branch_not_the_trailing_self_loop():
    loop = parse(USAGE, LISTING).main_loop()
    assert loop["instructions"] == 5 and loop["ffma_share"] == 0.4   # 0x20..0x60: LDS, 2 FFMA, BAR, BRA
    assert dict(loop["top"])["FFMA"] == 2


def test_main_loop_is_empty_without_a_backward_branch():
    assert parse(USAGE, LISTING.replace("@!P1 BRA 0x20", "@!P1 BRA 0x70")).main_loop() == {}


def test_main_loop_is_not_a_try_wait_retry_stub_that_branches_back_into_it():
    # an mbarrier wait in the loop (0x20..0x60) retries from a stub after EXIT that
    # branches back to the wait: its span 0x20..0xa0 is longer, but it holds the loop
    stub = LISTING.replace("        /*0090*/                   BRA 0x90;",
                           "        /*0090*/                   NOP ;\n"
                           "        /*00a0*/                   BRA 0x20;")
    loop = parse(USAGE, stub).main_loop()
    assert loop["instructions"] == 5 and dict(loop["top"])["FFMA"] == 2


BANKS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDS.128 R8, [R0] ;
        /*0020*/                   FFMA R12, R8.reuse, R4, R12 ;
        /*0030*/                   FFMA R13, R8, R5, R13 ;
        /*0040*/                   FFMA R14, R9, R6, R15 ;
        /*0050*/                   FFMA R16, R9.reuse, -R7, R16 ;
        /*0060*/                   LDS.128 R8, [R0+0x10] ;
        /*0070*/                   FFMA R17, R9, R3, RZ ;
        /*0080*/              @!P1 BRA 0x10 ;
        /*0090*/                   EXIT ;
"""


def test_ffma_bank_reads_count_sources_in_one_bank_after_the_reuse_cache():
    # 0x20: R8, R4, R12 all even: three in one bank. 0x30: R8 from the reuse cache,
    # R5 and R13 odd: two. 0x40: R9, R15 odd: two. 0x50: R7 odd (negated), R9 odd: two.
    # 0x70: after an LDS the cache is gone; R9 and R3 odd, RZ no read: two.
    reads = parse(USAGE, BANKS).ffma_bank_reads()
    assert reads == {"ffma": 5, "two_in_one_bank": 5, "three_in_one_bank": 1, "banks": 2}
    # four banks: 0x20 (8, 4, 12: bank 0) three, 0x30 (5, 13: bank 1) two, the rest apart
    four = parse(USAGE, BANKS).ffma_bank_reads(banks=4)
    assert (four["two_in_one_bank"], four["three_in_one_bank"]) == (2, 1)
