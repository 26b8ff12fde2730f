"""The tiny replay tables the replay, replay-table and simulate tests share: every outcome a row
can have, a baseline, the best (``TINY``); a table over two levels whose best differs by level
(``PLAN``); a table with start-up and compile costs (``COSTLY``)."""

from pathlib import Path

TINY = """tp_size,graph,proto,samples,failure,baseline,note
1,false,,10;10.2;9.9,,,NCCL does not matter at TP=1
1,true,,14;14.1,,,
2,false,LL,12;12.5;12.1,,1,
2,false,Simple,11;11.2,,,
2,true,LL,20;20.4;19.8,,,best
2,true,Simple,18;18.1,,,
2,true,LL128,,wrong-output,,
4,true,LL,,start-crash,,
"""

# the best config differs by level: solo/2 at 1, batch/2 at 8; batch/1 is the runner-up at 8
PLAN = """\
mode,size,samples@1,samples@8,failure,baseline,note
solo,1,100;101;99,200;201;199,,1,
solo,2,250;251;249,240;241;239,,,
batch,1,120;121;119,600;601;599,,,
batch,2,130;131;129,700;701;699,,,
mega,1,,,start-crash,,
mega,2,90;91;89,300;301;299,,,
"""

COSTLY = """tp_size,graph,env.NCCL_PROTO,samples,failure,baseline,startup_s,compile_s,note
2,false,LL,10;10;10,,1,100,0,
2,true,LL,20;20;20,,,300,50,compiles once per graph setting
2,true,Simple,21;21;21,,,300,50,same compile key as the LL row: NCCL only
2,false,Simple,9;9;9,start-crash,,40,0,
"""


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
