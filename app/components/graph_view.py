"""Big graphs in the app: Graphviz's `dot` lays them out on the server into SVG, shown in a small viewer that
zooms (wheel, + and -), pans (drag), fits, and searches the drawn nodes.

Note [Big graph view]
st.graphviz_chart draws in the browser with zoom turned off, which suits the small graphs most samples make
(and stays the view for them). A 2000-node model folded by module is still hundreds of boxes in a long chain:
readable only if one can zoom in, pan along it and find a node. The viewer is inline (an st.components.v1.html
frame: no network, no file); its SVG comes from `dot` (Debian's graphviz, as for the HTML report) and is cached
by DOT text. This box searches what is drawn and, through a folded module's tooltip (its members' names),
the nodes folded inside it: it highlights the module and says so; the page's "Find a node" unfolds it. Without `dot`, big graphs fall back to st.graphviz_chart.
It opens at natural size: on a picked node (the page's "Find a node", the numerics bisect's culprit) with its
neighbours around it, else on the graph's top band of nodes: a backward graph, whose saved values all enter at
the top, is wider than the page and its first nodes may sit far from its left edge.
"""
from __future__ import annotations

import html
import shutil

import streamlit as st
import streamlit.components.v1 as components

from visualizers.html_report import render_svg

BIG_NODES = 150  # graphs with more nodes than this get the viewer
HEIGHT = 640

_SCRIPT = """(function(){  // a closure: names like top and find are the window's
var view=document.getElementById('view'),svg=view.querySelector('svg'),box=document.getElementById('q');
var all=svg.viewBox.baseVal,home={x:all.x,y:all.y,w:all.width,h:all.height},vb;
svg.removeAttribute('width');svg.removeAttribute('height');svg.style.width='100%';svg.style.height='100%';
function set(){svg.setAttribute('viewBox',[vb.x,vb.y,vb.w,vb.h].join(' '));}
function top(){var w=view.clientWidth*0.75,h=w*view.clientHeight/view.clientWidth;  // natural size (pt)
 var x=home.w<w?home.x+(home.w-w)/2:home.x;
 if(home.w>w){fit();var lo=Infinity,hi=-Infinity;  // a wide graph: over the nodes drawn in its top band
  svg.querySelectorAll('g.node').forEach(function(n){var r=n.getBoundingClientRect(),
   a=at({clientX:r.left,clientY:r.top}),b=at({clientX:r.right,clientY:r.bottom});
   if(a.y<home.y+h){lo=Math.min(lo,a.x);hi=Math.max(hi,b.x);}});
  if(lo<hi)x=Math.min(Math.max(hi-lo<w?(lo+hi-w)/2:lo,home.x),home.x+home.w-w);}
 vb={x:x,y:home.y,w:w,h:h};set();}
function fit(){vb=Object.assign({},home);set();}
function zoom(f,cx,cy){if(cx===undefined){cx=vb.x+vb.w/2;cy=vb.y+vb.h/2;}
 vb={x:cx-(cx-vb.x)*f,y:cy-(cy-vb.y)*f,w:vb.w*f,h:vb.h*f};set();}
function at(e){var p=svg.createSVGPoint();p.x=e.clientX;p.y=e.clientY;return p.matrixTransform(svg.getScreenCTM().inverse());}
view.addEventListener('wheel',function(e){e.preventDefault();var p=at(e);zoom(e.deltaY>0?1.2:1/1.2,p.x,p.y);},{passive:false});
var drag=null;view.addEventListener('mousedown',function(e){drag=at(e);view.style.cursor='grabbing';});
window.addEventListener('mouseup',function(){drag=null;view.style.cursor='grab';});
view.addEventListener('mousemove',function(e){if(!drag)return;var p=at(e);vb.x-=p.x-drag.x;vb.y-=p.y-drag.y;set();});
function words(n){var t=n.querySelector('title'),a=n.querySelector('a');  // label, name and folded members
 return ((n.textContent||'')+' '+(a?(a.getAttribute('xlink:title')||a.getAttribute('title')||''):'')).toLowerCase();}
function find(){var q=box.value.trim().toLowerCase(),hits=[],folded=0;svg.querySelectorAll('g.node').forEach(function(n){
 var m=q&&words(n).indexOf(q)>=0;n.classList.toggle('hit',!!m);if(m){hits.push(n);
 if((n.textContent||'').toLowerCase().indexOf(q)<0)folded++;}});
 document.getElementById('hits').textContent=q?hits.length+' match'+(hits.length==1?'':'es')+
  (folded?' ('+folded+' inside folded modules: pick the node in "Find a node" above to unfold it)':''):'';
 if(hits.length)center(hits[0]);}
function center(n){var r=n.getBoundingClientRect(),a=at({clientX:r.left,clientY:r.top}),
 b=at({clientX:r.right,clientY:r.bottom}),w=Math.max((b.x-a.x)*4,view.clientWidth*0.75),  // natural size
 h=w*view.clientHeight/view.clientWidth;
 vb={x:(a.x+b.x)/2-w/2,y:(a.y+b.y)/2-h/2,w:w,h:h};set();}
box.addEventListener('input',find);
document.getElementById('zin').onclick=function(){zoom(1/1.5);};
document.getElementById('zout').onclick=function(){zoom(1.5);};
document.getElementById('fit').onclick=fit;document.getElementById('top').onclick=top;
top();var picked=svg.querySelector('g.node.gb-selected');if(picked)center(picked);  // the page's "Find a node"
})();"""

_STYLE = """
body{margin:0;font-family:system-ui,sans-serif;font-size:13px}
#bar{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-bottom:4px} #bar input{width:170px}
#view{height:%dpx;border:1px solid #e5e7eb;border-radius:6px;overflow:hidden;cursor:grab;user-select:none}
g.node.hit polygon,g.node.hit ellipse,g.node.hit path{stroke:#dc2626;stroke-width:5px}
#hits{color:#6b7280}
"""


@st.cache_data(max_entries=32, show_spinner="Laying out the graph with Graphviz…")
def _svg(dot: str) -> tuple[str | None, str]:
    return render_svg(dot)


def viewer_html(svg: str, node_count: int, height: int = HEIGHT) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'><style>" + _STYLE % height + "</style></head><body>"
            "<div id='bar'><input id='q' type='search' placeholder='search the drawn nodes' "
            f"aria-label='search the drawn nodes'><span id='hits'></span><button id='zin' title='zoom in'>+</button>"
            "<button id='zout' title='zoom out'>−</button><button id='top'>top</button>"
            "<button id='fit'>fit all</button>"
            f"<span style='color:#6b7280'>{html.escape(f'{node_count} nodes')} · wheel zooms, drag pans</span></div>"
            f"<div id='view'>{svg}</div><script>{_SCRIPT}</script></body></html>")


def show(dot: str, node_count: int, big: int = BIG_NODES) -> bool:
    """Show a graph of more than `big` nodes in the viewer; False when it is smaller or `dot` is missing
    (st.graphviz_chart then)."""
    if node_count <= big or not shutil.which("dot"):
        return False
    svg, problem = _svg(dot)
    if svg is None:
        st.caption(problem)
        return False
    components.html(viewer_html(svg, node_count), height=HEIGHT + 70)  # the bar may wrap to two lines
    return True

