#!/usr/bin/env python3
"""Kernels of CUDA object files, from the ELF cubins inside their fatbins (no cuobjdump needed):
per (arch, mangled name) the machine code (.text.NAME), its relocations (offset, type, symbol
name, addend), its registers (sh_info >> 24 of .text.NAME) and its static shared memory.
  scripts/cubin-kernels.py dump OUT.json FILE.o...      collect
  scripts/cubin-kernels.py compare OLD.json NEW.json    kernel by kernel (demangled names; RENAMES)
Needs objcopy, c++filt and python3-zstandard (HYDRAGEN_SETUP_CUBIN=1 scripts/setup)."""
import hashlib, json, re, struct, subprocess, sys, tempfile, os, zstandard

def fatbin_of(obj):
    with tempfile.NamedTemporaryFile(delete=False) as t: path = t.name
    subprocess.run(['objcopy', '-O', 'binary', '--only-section=.nv_fatbin', obj, path], check=True)
    data = open(path, 'rb').read(); os.unlink(path)
    return data

def cubins(fatbin):
    off = 0
    while off + 16 <= len(fatbin):
        magic, _, hsize, fsize = struct.unpack_from('<IHHQ', fatbin, off)
        if magic != 0xba55ed50: break
        e, end = off + hsize, off + hsize + fsize
        while e < end:
            kind, _, ehsize, psize = struct.unpack_from('<HHIQ', fatbin, e)
            raw = fatbin[e:e + ehsize]
            arch = struct.unpack_from('<I', raw, 28)[0]
            dsize = struct.unpack_from('<Q', raw, 56)[0]
            payload = fatbin[e + ehsize:e + ehsize + psize]
            if kind == 2:
                if payload[:4] == b'\x28\xb5\x2f\xfd':
                    payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=dsize)
                yield arch, payload
            e += ehsize + psize
        off = end

def kernels(elf, arch):
    shoff, = struct.unpack_from('<Q', elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', elf, 0x3a)
    secs = [struct.unpack_from('<IIQQQQIIQQ', elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx]
    def name(off, tab=strtab):
        s = elf[tab[4] + off:]; return s[:s.index(b'\0')].decode()
    names = [name(s[0]) for s in secs]
    symtab = next((s for s, n in zip(secs, names) if s[1] == 2), None)
    syms = []
    if symtab:
        symstr = secs[symtab[6]]
        for i in range(symtab[5] // 24):
            st_name, = struct.unpack_from('<I', elf, symtab[4] + i * 24)
            syms.append(name(st_name, symstr))
    out = {}
    for s, n in zip(secs, names):
        if n.startswith('.text.'):
            k = n[len('.text.'):]
            out[k] = {'text': elf[s[4]:s[4] + s[5]].hex(), 'regs': s[7] >> 24, 'bytes': s[5]}
    # .nv.info entries: EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11), (symbol, value)
    for s, n in zip(secs, names):
        if not n.startswith('.nv.info'): continue
        i, end = s[4], s[4] + s[5]
        while i + 2 <= end:
            fmt, attr = elf[i], elf[i + 1]
            if fmt == 0x04:
                size, = struct.unpack_from('<H', elf, i + 2)
                if attr in (0x2f, 0x11) and size >= 8:
                    sym, value = struct.unpack_from('<II', elf, i + 4)
                    k = syms[sym] if sym < len(syms) else None
                    if k in out: out[k]['regs' if attr == 0x2f else 'frame'] = value
                i += 4 + size
            elif fmt == 0x03: i += 4
            elif fmt == 0x02: i += 3
            else: i += 2
    for s, n in zip(secs, names):
        m = re.match(r'\.rela?\.text\.(.*)', n)
        if m and m.group(1) in out:
            rela = n.startswith('.rela')
            ent = 24 if rela else 16
            rel = []
            for i in range(s[5] // ent):
                r_off, r_info = struct.unpack_from('<QQ', elf, s[4] + i * ent)
                addend = struct.unpack_from('<q', elf, s[4] + i * ent + 16)[0] if rela else 0
                rel.append([r_off, r_info & 0xffffffff, syms[r_info >> 32] if (r_info >> 32) < len(syms) else '?', addend])
            out[m.group(1)]['relocs'] = rel
        m = re.match(r'\.nv\.shared\.(.*)', n)
        if m and m.group(1) in out: out[m.group(1)]['shared'] = s[5]
        m = re.match(r'\.nv\.constant0\.(.*)', n)
        if m and m.group(1) in out: out[m.group(1)]['param_bytes'] = s[5]
    return out

def dump(out_path, objs):
    result = {}
    for obj in objs:
        for arch, elf in cubins(fatbin_of(obj)):
            for k, v in kernels(elf, arch).items():
                result['sm_%d %s' % (arch, k)] = dict(v, file=os.path.basename(obj))
    json.dump(result, open(out_path, 'w'))
    print(out_path, len(result), 'kernels')

# Old name -> new name (demangled) for kernels whose templates lost a parameter (41a91dc).
RENAMES = [
    (r'paged_attention_kernel<(.*), (64|128), 8, 1>', r'shared_mma_kernel<\1, \2>'),
    (r'shared_attention_wgmma_kernel<(.*), 2>', r'shared_attention_wgmma_kernel<\1>'),
    (r'shared_attention_ws_kernel<(.*), true>', r'shared_attention_ws_kernel<\1>'),
    (r'decode_quad_kernel<(.*), (64|128), 1>', r'decode_quad_kernel<\1, \2>'),
]

def demangle(names):
    out = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True).stdout.split('\n')
    return dict(zip(names, out))

def short(n):
    n = n.replace('hydragen::cuda::', '').replace('(anonymous namespace)::', '')
    return re.sub(r'\((hydragen::cuda::)?PagedAttentionParams.*\)$|\(.*\)$', '', n)

def compare(old_path, new_path):
    old, new = json.load(open(old_path)), json.load(open(new_path))
    dm = demangle(sorted({k.split(' ', 1)[1] for k in old} | {k.split(' ', 1)[1] for k in new}))
    def key(k):
        arch, m = k.split(' ', 1); return arch, dm[m]
    newk = {key(k): k for k in new}
    seen = set()
    counts = {}
    for k in sorted(old, key=lambda k: (key(k)[1], key(k)[0])):
        arch, name = key(k)
        target = name
        for a, b in RENAMES: target = re.sub(a, b, target)
        label = short(name) + ('' if target == name else '  ->  ' + short(target))
        if (arch, target) not in newk:
            verdict = 'deleted'
            extra = 'regs %d' % old[k]['regs']
        else:
            nk = newk[(arch, target)]; seen.add(nk)
            o, n = old[k], new[nk]
            mm_o, mm_n = k.split(' ', 1)[1], nk.split(' ', 1)[1]
            rel_o = [[r[0], r[1], r[2].replace(mm_o, 'SELF'), r[3]] for r in o.get('relocs', [])]
            rel_n = [[r[0], r[1], r[2].replace(mm_n, 'SELF'), r[3]] for r in n.get('relocs', [])]
            same = o['text'] == n['text'] and rel_o == rel_n
            verdict = 'identical' if same else 'DIFFERS'
            extra = 'regs %d -> %d, frame %s -> %s, %d -> %d bytes' % (o['regs'], n['regs'], o.get('frame'), n.get('frame'), o['bytes'], n['bytes'])
            if o.get('shared') != n.get('shared'): extra += ', static shared %s -> %s' % (o.get('shared'), n.get('shared'))
            if same and o['regs'] == n['regs'] and o.get('frame') == n.get('frame'): extra = 'regs %d, frame %s, %d bytes' % (o['regs'], o.get('frame'), o['bytes'])
        counts[verdict] = counts.get(verdict, 0) + 1
        print('%-6s %-10s %-88s %s' % (arch, verdict, label, extra))
    for nk in sorted(set(new) - seen):
        arch, name = key(nk)
        counts['new'] = counts.get('new', 0) + 1
        print('%-6s %-10s %-88s regs %d' % (arch, 'new', short(name), new[nk]['regs']))
    print(counts)

if __name__ == '__main__':
    if sys.argv[1] == 'dump': dump(sys.argv[2], sys.argv[3:])
    else: compare(sys.argv[2], sys.argv[3])
